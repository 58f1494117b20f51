"""What a run says: summary.json and the console table (summary.py), report.html (html.py), OpenLineage events
(lineage.py)."""

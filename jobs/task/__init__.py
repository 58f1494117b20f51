"""What one task does with one split: its units (split_units.py), the records decoded under the corruption policy
(split_decode.py), every group's decision and the ledgers' events (split_task.py); stage.py runs the splits as one
Spark stage (an RDD on a classic session, DataFrame operations over Connect) and in process."""

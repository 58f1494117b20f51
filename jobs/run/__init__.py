"""The replay job (jobs/replay.py) around the pipeline: its one Spark stage (stage.py), what a task writes (sink.py),
the run's counters and console summary (summary.py), and a run a scheduler can trust: OUT claimed (claim.py),
built aside and published whole (outputs.py), stopped by a signal or its JVM's death (lifecycle.py), its
progress shown (progress.py)."""

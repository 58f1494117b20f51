"""The process a run lives in: the Spark session (session.py), stop signals and the JVM's death (lifecycle.py), the
console and log file (console.py), progress, the run's job tag, the Python workers' daemon and its zygote."""

"""NS.timers, the timer ledger as an Iceberg table (docs/iceberg.md): one row per message with its latest state
across nights. A night's ledger (jobs/run/timer_ledger.py) is merged by Spark with the rows the table holds (a
message pending last night and delivered tonight becomes one delivered row) and committed replacing the table's
files (jobs/run/ledger_lake.py)."""
from jobs.run.ledger_lake import commit_replacing, read_held
from jobs.run.timer_ledger import LEDGER_SCHEMA, TIMERS, write_ledger

TABLE = TIMERS


def merge_ledger(spark, target, out_uri, where, written, reads, overdue_ms, event_files=()):
    """OUT.tmp/timers/: the night's ledger merged with NS.timers' rows. Returns (write_ledger's answer, the
    HeldTable its commit replaces)."""
    held, rows = read_held(spark, target, TABLE, LEDGER_SCHEMA)
    return write_ledger(spark, out_uri, where, written, reads, overdue_ms, held=rows, event_files=event_files), held


def commit_timers(target, where, run, held):
    """{table: files added}: NS.timers' files replaced by the merged ones of OUT.tmp/timers/."""
    return commit_replacing(target, where, run, held, TABLE, LEDGER_SCHEMA)

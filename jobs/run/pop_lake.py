"""NS.pop, the POP ledger as an Iceberg table (docs/iceberg.md): one row per popped message with its latest fate
across nights. The rows the table holds give their evidence (handles, UNIQ_KEY, revived copy) to the night's
(jobs/run/pop_ledger.py: a message popped last night, its checkpoint passed and its copy revived tonight, becomes
one revived row), and the merged ledger is committed replacing the table's files (jobs/run/ledger_lake.py)."""
from jobs.run.ledger_lake import commit_replacing, read_held
from jobs.run.pop_ledger import LEDGER_SCHEMA, POP, write_pop_ledger


def merge_pop(spark, target, out_uri, where, written, plans, event_files=()):
    """OUT.tmp/pop/: the night's POP ledger merged with NS.pop's rows. Returns (write_pop_ledger's answer, the
    HeldTable its commit replaces)."""
    held, rows = read_held(spark, target, POP, LEDGER_SCHEMA)
    return write_pop_ledger(spark, out_uri, where, written, plans, held=rows, event_files=event_files), held


def commit_pop(target, where, run, held):
    """{table: files added}: NS.pop's files replaced by the merged ones of OUT.tmp/pop/."""
    return commit_replacing(target, where, run, held, POP, LEDGER_SCHEMA)

"""What a run's answer becomes (--sink): one class per kind behind one protocol, chosen once from the command
line (`sink_of`); the run (jobs/replay.py, jobs/run/outputs.py) asks the object, never the option's string.

As Spark's DataSourceV2 splits a write: `spec` is what every task writes (jobs/run/sink.py's SplitWriter, under
the run's temporary OUT), `commit` is the driver's once the stage succeeded (the successful attempts' files moved
to their names), `check` what the sink refuses before Spark starts, `publish` what it adds to the summary before
OUT is published (Iceberg: the tables' snapshots). Abort is OUT's own (outputs.OutputRun.abandon): every sink
writes under the temporary OUT first, so removing it takes back whatever a failed run wrote.

A new sink is one class here (or a module of its own) and its tests."""
import json
import sys
import time

import pyarrow as pa

from jobs.errors import UsageError
from jobs.pipeline.brokers import bare
from jobs.pipeline.cq_audit import CQ_AUDIT_SCHEMA
from jobs.run import iceberg_sink as lake_sink
from jobs.run.sink import SinkSpec, commit, write_driver_part, write_empty_tables
from schemas.arrow_schemas import CORRUPT_SCHEMA


class ParquetSink:
    """The outputs as Parquet under OUT (docs/output.md), published with OUT."""

    name = "parquet"

    def spec(self, out, options):
        return SinkSpec(out, options.layout, options.with_body)

    def starting_offsets(self, brokers, planned):
        """--starting-offsets that the sink knows better once the run is planned (None: the command line's)."""
        return None

    def check(self, planned, clean_stale):
        """Refuse, before Spark starts, what the sink cannot take (UsageError)."""

    def commit(self, out, reports, planned, options):
        """{output: (files, rows, bytes)}: the successful attempts' files at their names, the driver's parts
        (damage found while planning), and an empty table for every answer with no row."""
        written = commit(out, reports)
        if planned.problems:
            schema = CORRUPT_SCHEMA.append(pa.field("broker", pa.string()))
            write_driver_part(out, "audit/corrupt", pa.Table.from_pylist(
                [{f.name: p.get(f.name) for f in schema} for p in planned.problems], schema=schema))
        written.update(write_empty_tables(out, options.layout, options.with_body, written))
        if options.audit_consume_queue and "audit/consume_queue" not in written:  # asked, nothing found: a table
            write_driver_part(out, "audit/consume_queue", CQ_AUDIT_SCHEMA.empty_table())  # of no row
        return written

    def publish(self, out, summary, planned, options, run):
        """What the sink adds to the summary once the outputs are committed, before OUT is published."""


class NoopSink(ParquetSink):
    """Every decision made, nothing written: what a benchmark measures."""

    name = "noop"

    def spec(self, out, options):
        return SinkSpec(out, "noop", options.with_body)

    def commit(self, out, reports, planned, options):
        return {}

    def publish(self, out, summary, planned, options, run):
        summary["sink"] = "noop: every decision made, nothing written"


class IcebergSink(ParquetSink):
    """The answer committed to Iceberg tables (jobs/run/iceberg_sink.py, docs/iceberg.md): the tasks write the
    normalized layout's parts as for Parquet, a file per partition; the driver adds them to the tables, one
    snapshot each, before OUT (the summary, offsets.json, the report) is published."""

    name = "iceberg"

    def __init__(self, target):
        self.target = target

    def spec(self, out, options):
        return SinkSpec(out, options.layout, options.with_body, for_tables=True)

    def starting_offsets(self, brokers, planned):
        """With `--starting-offsets iceberg`: each queue from where the run's own groups end in the lake."""
        if not self.target.continuing:
            return None
        return starts_json(brokers, lake_sink.starting_offsets(self.target, planned.parts))

    def check(self, planned, clean_stale):
        """Refuse offsets a group of the run holds and lost catalogs (exit 2); list, or with --clean-stale
        remove, parts of dead runs."""
        for line in lake_sink.check_lake(self.target, planned.parts):
            print(f"warning: {line}", file=sys.stderr)
        stale = lake_sink.stale_runs(self.target)
        listed = ", ".join(p for _, p in stale)
        if stale and clean_stale:
            lake_sink.remove_stale(stale)
            print(f"removed {len(stale)} folder(s) of parts no snapshot references: {listed}", file=sys.stderr)
        elif stale:
            print(f"warning: {len(stale)} folder(s) of parts in the tables' locations that no snapshot references "
                  f"(runs that died before their commit, or parts compacted away whose snapshots expired): "
                  f"{listed}; --clean-stale (or jobs.maintain, once they are old) removes them", file=sys.stderr)

    def publish(self, out, summary, planned, options, run):
        started = time.time()
        written = {name: (o["files"], o["rows"], o["bytes"]) for name, o in summary["outputs"].items()}
        added = lake_sink.publish_tables(self.target, out, written, run, options.with_body, planned.parts)
        summary["sink"] = f"iceberg: namespace {self.target.namespace} of {self.target.describe()}"
        summary["iceberg"] = {"catalog": self.target.describe(), "namespace": self.target.namespace,
                              "tables": added, "commit_seconds": round(time.time() - started, 3)}


SINKS = {sink.name: sink for sink in (ParquetSink, IcebergSink, NoopSink)}


def sink_of(args, brokers):
    """The run's sink, chosen once from --sink: for Iceberg, its catalog and the run's stores by what they are,
    and `--starting-offsets iceberg` as where the lake's ranges of each store end (none yet: the earliest),
    refined per group once the plan names the run's groups (ParquetSink.starting_offsets)."""
    kind = SINKS[args.sink]
    continuing = args.starting_offsets == "iceberg"
    if kind is not IcebergSink:
        if args.catalog or args.catalog_uri or args.warehouse:
            raise UsageError("--catalog, --catalog-uri and --warehouse go with --sink iceberg")
        if continuing:
            raise UsageError("--starting-offsets iceberg reads the Iceberg tables' offsets: give --sink iceberg")
        return kind()
    target = lake_sink.target_of(args)
    if args.layout != "normalized":
        raise UsageError("--sink iceberg writes the normalized layout's tables (messages once, narrow matched rows)")
    target = lake_sink.with_stores(target, brokers, continuing)
    if continuing:
        args.starting_offsets = starts_json(brokers, lake_sink.starting_offsets(target))
    return IcebergSink(target)


def starts_json(brokers, starts):
    """--starting-offsets of lake.starts' {broker: {topic: {queue: offset}}}: per topic for a bare --store."""
    if bare(brokers):
        return json.dumps(starts.get(brokers[0].name, {}), sort_keys=True)
    return json.dumps({"brokers": {b.name: starts.get(b.name, {}) for b in brokers}}, sort_keys=True)

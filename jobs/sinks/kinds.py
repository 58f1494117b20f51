"""What a run's answer becomes (--sink): one class per kind behind one protocol, chosen once from the command
line (jobs/cli.py sink_choice, then `sink_of`: the class makes itself, `Sink.of`); the run (jobs/replay.py,
jobs/output/publish.py) asks the object, never the option's string.

As Spark's DataSourceV2 splits a write: `spec` is what every task writes (jobs/output/writers.py's SplitWriter, under
the run's temporary OUT), `commit` is the driver's once the stage succeeded (the successful attempts' files moved
to their names), `check` what the sink refuses before Spark starts, `publish` what it adds to the summary before
OUT is published (Iceberg: the tables' snapshots). Abort is OUT's own (outputs.OutputRun.abandon): every sink
writes under the temporary OUT first, so removing it takes back whatever a failed run wrote.

Each sink names its task-side writer (`writer`: jobs/output/writers.py's SplitWriter, or a subclass that cuts or counts
parts otherwise); the layout (jobs/output/layouts.py) is the options' object, which the writer asks. A new sink is one
`Sink` subclass here (or in a module of its own), its writer when its parts differ, its entry in SINKS, and its
tests (docs/design.md, "Adding a sink")."""
from __future__ import annotations

import abc
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa

from jobs.errors import UsageError
from jobs.ledgers.pop import CARRIED, LAKE, carried_ledger, write_pop_ledger
from jobs.ledgers.timer import write_ledger
from jobs.ledgers.traces import write_trace_ledgers
from jobs.ledgers.transactions import write_transactions
from jobs.output.layouts import NORMALIZED, Normalized, Wide
from jobs.output.place import Place
from jobs.output.writers import (
    POP_EVENTS,
    TIMER_EVENTS,
    TRACE_EVENTS,
    TRANS_EVENTS,
    CountingSplitWriter,
    SinkSpec,
    SplitWriter,
    TableSplitWriter,
    attempt_parts,
    commit,
    write_driver_part,
    write_empty_tables,
)
from jobs.sinks.iceberg import tables as lake_sink
from jobs.sinks.iceberg.ledger_tables import (
    HeldTable,
    commit_consumption,
    commit_pop,
    commit_timers,
    commit_traces,
    commit_transactions,
    merge_consumption,
    merge_pop,
    merge_timers,
    merge_transactions,
)
from jobs.task.cq_audit import CQ_AUDIT_SCHEMA
from schemas.arrow_schemas import CORRUPT_SCHEMA

if TYPE_CHECKING:
    import pyarrow.fs as pafs
    from pyspark.sql import SparkSession

    from jobs.ledgers.timer import Reads
    from jobs.plan.brokers import Broker
    from jobs.plan.cluster import ClusterPlan

    Written = dict[str, tuple[int, int, int]]  # {output: (files, rows, bytes)}
    Counts = list[dict[str, Any]]  # a ledger's count rows

# `options` below is a jobs.settings.JobOptions: of a layer above the sinks (setup.cfg [importlinter]), so typed Any


class Sink(abc.ABC):
    """The protocol every sink follows; each hook's default is what a sink that has nothing to add does."""

    name: str | None = None  # --sink's value (SINKS)
    writer = SplitWriter  # the task-side writer of a split's parts (jobs/output/writers.py)
    across = CARRIED  # summary.json's name of a ledger merged across nights (pop_summary): an earlier OUT's carried

    @classmethod
    def of(cls, choice: SinkChoice, brokers: Sequence[Broker]) -> tuple[Sink, str | None]:
        """(the sink of the command line's choice (SinkChoice), the --starting-offsets it reads: None, the
        command line's); UsageError for what goes with another sink."""
        if choice.catalog.given:
            raise UsageError("--catalog, --catalog-uri and --warehouse go with --sink iceberg")
        if choice.continuing:
            raise UsageError("--starting-offsets iceberg reads the Iceberg tables' offsets: give --sink iceberg")
        return cls(), None

    def spec(self, out: Place, options: Any) -> SinkSpec:
        """What every task writes, shipped with the plan: under the temporary OUT, in the run's layout."""
        return SinkSpec(out, options.layout, options.with_body, self.writer)

    def scope(self) -> lake_sink.LakeScope | None:
        """What the plan takes from what the sink holds (jobs/plan/build.py: where each group starts, what it holds
        already), read once before the plan; None: nothing (the command line's window)."""
        return None

    def check(self, planned: ClusterPlan, clean_stale: bool) -> None:
        """Refuse, before Spark starts, what the sink cannot take (UsageError)."""

    @abc.abstractmethod
    def commit(self, out: Place, reports: list[dict[str, Any]], planned: ClusterPlan, options: Any) -> Written:
        """{output: (files, rows, bytes)} of what the successful attempts (and the driver) wrote."""

    def ledger(self, spark: SparkSession, out: str, where: tuple[pafs.FileSystem, str], written: Written,
               reads: Reads, options: Any) -> Counts | None:
        """The timer ledger's counts per (broker, real topic), its outputs put into `written` (None: none made)."""
        return None

    def pop_ledger(self, spark: SparkSession, out: str, where: tuple[pafs.FileSystem, str], written: Written,
                   planned: ClusterPlan, earlier: str | None = None) -> tuple[Counts, Counts | None, list[str]] | None:
        """(the POP ledger's counts per (broker, group) of the night, of the ledger it merged into or None, its
        warnings), its outputs put into `written` (None: none made). `earlier`: the offsets.json the night starts
        from."""
        return None

    def transactions(self, spark: SparkSession, out: str, where: tuple[pafs.FileSystem, str], written: Written,
                     reads: Reads, window_ms: Mapping[str | None, int]) -> Counts | None:
        """The transaction ledger's counts per (broker, topic, fate), its outputs put into `written` (None: none
        made)."""

    def trace_ledger(self, spark: SparkSession, out: str, where: tuple[pafs.FileSystem, str], written: Written,
                     planned: ClusterPlan) -> tuple[Counts, Counts | None] | None:
        """(the trace ledgers' counts per (broker, group, final) of the night, of the table it merged into or None),
        their outputs put into `written` (None: none made)."""
        return None

    def publish(self, out: Place, summary: dict[str, Any], planned: ClusterPlan, options: Any, run: str) -> None:
        """What the sink adds to the summary once the outputs are committed, before OUT is published."""

    def in_attempts(self) -> dict[str, str]:
        """{final name: attempt's file} (relative to the temporary OUT) of the parts OUT's publish copies from
        where their attempts wrote them (outputs.OutputRun.publish)."""
        return {}


class FileSink(Sink):
    """A sink whose tasks write Parquet parts under the temporary OUT, committed by the driver from the
    successful attempts (Parquet, Iceberg); on an object store (a move is a copy and a delete) the parts stay
    where their attempts wrote them, `kept`, each copied once to its place in OUT or in its table."""

    kept: dict = {}  # {output: [(attempt's file, final name)]}

    def commit(self, out: Place, reports: list[dict[str, Any]], planned: ClusterPlan, options: Any) -> Written:
        """{output: (files, rows, bytes)}: the successful attempts' files at their names where a rename is one
        step (on an object store left where their attempts wrote them: `kept`), the driver's parts (damage found
        while planning), and an empty table for every answer with no row."""
        out = Place.of(out)
        if not out.renames:
            self.kept = attempt_parts(reports)
        written = commit(out, reports, move=out.renames)
        if planned.problems:
            schema = CORRUPT_SCHEMA.append(pa.field("broker", pa.string()))
            write_driver_part(out, "audit/corrupt", pa.Table.from_pylist(
                [{f.name: p.get(f.name) for f in schema} for p in planned.problems], schema=schema))
        written.update(write_empty_tables(out, options.layout, options.with_body, written))
        if options.audit_consume_queue and "audit/consume_queue" not in written:  # asked, nothing found: a table
            write_driver_part(out, "audit/consume_queue", CQ_AUDIT_SCHEMA.empty_table())  # of no row
        return written

    def ledger(self, spark: SparkSession, out: str, where: tuple[pafs.FileSystem, str], written: Written,
               reads: Reads, options: Any) -> Counts | None:
        """The timer ledger (timers/, jobs/ledgers/timer.py) from the committed timer events: its
        {output: (files, rows, bytes)} put into `written`, and its counts per (broker, real topic) returned.
        `where`: OUT's (filesystem, path)."""
        made, counts = write_ledger(spark, out, where, written, reads, options.timer_overdue,
                                    event_files=self._events(TIMER_EVENTS))
        written.update(made)
        return counts

    def _events(self, output):
        """A ledger's events' parts (TIMER_EVENTS, POP_EVENTS) the commit left where their attempts wrote them (an
        object store), taken out of `kept`: the ledger reads them there, and neither OUT nor a table gets them."""
        return [path for path, _ in self.kept.pop(output, ())] if self.kept else []

    def pop_ledger(self, spark: SparkSession, out: str, where: tuple[pafs.FileSystem, str], written: Written,
                   planned: ClusterPlan, earlier: str | None = None) -> tuple[Counts, Counts | None, list[str]] | None:
        """The POP ledger (pop/, jobs/ledgers/pop.py) from the committed POP events: its {output: (files, rows,
        bytes)} put into `written`, (its counts per (broker, group), those of the ledger carried on or None, the
        warnings it has) returned. `where`: OUT's (filesystem, path); `earlier`: the offsets.json the night starts
        from, whose OUT's pop/ it carries on (carried_ledger), when it has one."""
        plans = [p.plan for _, p in planned.parts]
        held = stored_keys = None
        notes = []
        if earlier and any(p.pop_revive is not None for p in plans):
            held, stored_keys = carried_ledger(spark, os.path.dirname(earlier))
            if held is None:
                notes.append(
                    f"--starting-offsets {earlier}: no pop/ beside it (not an earlier night's OUT/offsets.json): "
                    "the POP ledger says what tonight's records tell, messages popped in an earlier night are in "
                    "flight or not looked for (docs/output.md)")
        made, counts, table = write_pop_ledger(spark, out, where, written, plans, held=held, stored_keys=stored_keys,
                                               event_files=self._events(POP_EVENTS))
        written.update(made)
        return counts, table, notes

    def transactions(self, spark: SparkSession, out: str, where: tuple[pafs.FileSystem, str], written: Written,
                     reads: Reads, window_ms: Mapping[str | None, int]) -> Counts | None:
        """The transaction ledger (transactions/, jobs/ledgers/transactions.py) from the committed transaction
        events: its {output: (files, rows, bytes)} put into `written`, its counts per (broker, topic, fate)
        returned."""
        made, counts = write_transactions(spark, out, where, written, reads, window_ms,
                                          event_files=self._events(TRANS_EVENTS))
        written.update(made)
        return counts

    def trace_ledger(self, spark: SparkSession, out: str, where: tuple[pafs.FileSystem, str], written: Written,
                     planned: ClusterPlan) -> tuple[Counts, Counts | None] | None:
        """OUT/traces/ and OUT/consumption/ (jobs/ledgers/traces.py) from the committed trace events: their
        {output: (files, rows, bytes)} put into `written`, (their counts per (broker, group, final), None)."""
        found = write_trace_ledgers(spark, out, where, written, [p.plan for _, p in planned.parts],
                                    event_files=self._events(TRACE_EVENTS))
        if found is None:
            return None
        written.update(found[0])
        return found[1], None

    def in_attempts(self) -> dict[str, str]:
        """{final name: attempt's file} (relative to the temporary OUT) of the parts OUT's publish copies from
        where their attempts wrote them (outputs.OutputRun.publish)."""
        return {final: path for parts in self.kept.values() for path, final in parts}


class ParquetSink(FileSink):
    """The outputs as Parquet under OUT (docs/output.md), published with OUT."""

    name = "parquet"


class NoopSink(Sink):
    """Every decision made, nothing written (the ledgers' events counted, not kept): what a benchmark measures.
    Its counts are the normalized layout's, whatever --layout says."""

    name = "noop"
    writer = CountingSplitWriter

    def spec(self, out: Place, options: Any) -> SinkSpec:
        return SinkSpec(out, NORMALIZED, options.with_body, self.writer)

    def commit(self, out: Place, reports: list[dict[str, Any]], planned: ClusterPlan, options: Any) -> Written:
        return {}

    def publish(self, out: Place, summary: dict[str, Any], planned: ClusterPlan, options: Any, run: str) -> None:
        summary["sink"] = "noop: every decision made, nothing written"


class IcebergSink(FileSink):
    """The answer committed to Iceberg tables (jobs/sinks/iceberg/tables.py, docs/iceberg.md): the tasks write the
    normalized layout's parts as for Parquet, a file per partition; the driver adds them to the tables, one
    snapshot each, before OUT (the summary, offsets.json, the report) is published."""

    name = "iceberg"
    across = LAKE  # the tables, NS.pop
    writer = TableSplitWriter
    held_timers: HeldTable | None  # each set in __init__, then by its ledger's merge
    held_pop: HeldTable | None
    held_transactions: HeldTable | None
    held_consumption: HeldTable | None
    out_where: Place | None

    def __init__(self, target: lake_sink.IcebergTarget) -> None:
        self.target = target
        self.held_timers = None  # what NS.timers held when the run merged its ledger (ledger, then publish)
        self.held_pop = None  # what NS.pop held when the run merged its POP ledger (pop_ledger, then publish)
        self.held_transactions = None  # what NS.transactions held when the run merged its transaction ledger
        self.held_consumption = None  # what NS.consumption held when the run merged it (trace_ledger, then publish)
        self.out_where = None  # the temporary OUT (a Place), where the merged ledger waits for publish

    @classmethod
    def of(cls, choice: SinkChoice, brokers: Sequence[Broker]) -> tuple[Sink, str | None]:
        """Its catalog and the run's stores by what they are; with `--starting-offsets iceberg` no offsets of the
        command line (the plan asks the lake's scope where each group starts)."""
        target = lake_sink.catalog_target(choice.catalog)
        if not choice.layout.tables:
            raise UsageError("--sink iceberg writes the normalized layout's tables (messages once, narrow matched "
                             "rows)")
        target = lake_sink.with_stores(target, brokers, choice.continuing)
        return cls(target), "{}" if choice.continuing else None

    def scope(self) -> lake_sink.LakeScope | None:
        """With `--starting-offsets iceberg`: the lake's groups' ranges, read once (lake_sink.LakeScope), which the
        plan asks where each of the run's groups starts and what it holds already."""
        return lake_sink.LakeScope(self.target) if self.target.continuing else None

    def check(self, planned: ClusterPlan, clean_stale: bool) -> None:
        """Refuse offsets a group of the run holds and lost catalogs (exit 2); list, or with --clean-stale
        remove, parts of dead runs."""
        for line in lake_sink.check_lake(self.target, planned.parts):
            print(f"warning: {line}", file=sys.stderr)
        stale = lake_sink.stale_runs(self.target)
        listed = ", ".join(p for _, p, _ in stale)
        if stale and clean_stale:
            lake_sink.remove_stale(stale)
            print(f"removed {len(stale)} folder(s) of parts no snapshot references: {listed}", file=sys.stderr)
        elif stale:
            print(f"warning: {len(stale)} folder(s) of parts in the tables' locations that no snapshot references "
                  f"(runs that died before their commit, or parts compacted away whose snapshots expired): "
                  f"{listed}; --clean-stale (or jobs.maintain, once they are old) removes them", file=sys.stderr)

    def ledger(self, spark: SparkSession, out: str, where: tuple[pafs.FileSystem, str], written: Written,
               reads: Reads, options: Any) -> Counts | None:
        """NS.timers' rows merged with the night's (jobs/sinks/iceberg/ledger_tables.py), committed by `publish`."""
        (made, counts), self.held_timers = merge_timers(spark, self.target, out, where, written, reads,
                                                        options.timer_overdue, event_files=self._events(TIMER_EVENTS))
        self.out_where = Place(where[0], where[1], out)  # the temporary OUT, where the merged ledger waits
        written.update(made)
        return counts

    def pop_ledger(self, spark: SparkSession, out: str, where: tuple[pafs.FileSystem, str], written: Written,
                   planned: ClusterPlan, earlier: str | None = None) -> tuple[Counts, Counts | None, list[str]] | None:
        """NS.pop's rows merged with the night's POP events (jobs/sinks/iceberg/ledger_tables.py), committed by
        `publish`: (the night's counts, the merged table's, no warning)."""
        (made, counts, table), self.held_pop = merge_pop(spark, self.target, out, where, written,
                                                         [p.plan for _, p in planned.parts],
                                                         event_files=self._events(POP_EVENTS))
        self.out_where = Place(where[0], where[1], out)
        written.update(made)
        return counts, table, []

    def transactions(self, spark: SparkSession, out: str, where: tuple[pafs.FileSystem, str], written: Written,
                     reads: Reads, window_ms: Mapping[str | None, int]) -> Counts | None:
        """NS.transactions' rows folded with the night's events (jobs/ledgers/transactions.py), committed by
        `publish`: the merged table's counts."""
        (made, counts), self.held_transactions = merge_transactions(
            spark, self.target, out, where, written, reads, window_ms, event_files=self._events(TRANS_EVENTS))
        self.out_where = Place(where[0], where[1], out)
        written.update(made)
        return counts

    def trace_ledger(self, spark: SparkSession, out: str, where: tuple[pafs.FileSystem, str], written: Written,
                     planned: ClusterPlan) -> tuple[Counts, Counts | None] | None:
        """NS.consumption's rows merged with the night's trace events, NS.traces' night (jobs/ledgers/traces.py),
        committed by `publish`: (the night's counts, the merged table's)."""
        found, held = merge_consumption(spark, self.target, out, where, written, [p.plan for _, p in planned.parts],
                                        event_files=self._events(TRACE_EVENTS))
        if found is None:
            return None
        self.held_consumption = held
        self.out_where = Place(where[0], where[1], out)
        written.update(found[0])
        return found[1], found[2]

    def publish(self, out: Place, summary: dict[str, Any], planned: ClusterPlan, options: Any, run: str) -> None:
        started = time.time()
        written = {name: (o["files"], o["rows"], o["bytes"]) for name, o in summary["outputs"].items()}
        merged: list[Callable[[], Any]] = []  # the night's merged ledgers (ledger, pop_ledger), those that were made
        # (each held_* is set with out_where, by its ledger's merge: neither is None in the lambdas)
        if self.held_timers is not None:
            merged.append(lambda: commit_timers(self.target, cast(Place, self.out_where), run,
                                                cast(HeldTable, self.held_timers)))
        if self.held_pop is not None:
            merged.append(lambda: commit_pop(self.target, cast(Place, self.out_where), run,
                                             cast(HeldTable, self.held_pop)))
        if self.held_transactions is not None:
            merged.append(lambda: commit_transactions(self.target, cast(Place, self.out_where), run,
                                                      cast(HeldTable, self.held_transactions)))
        if self.held_consumption is not None:
            merged.append(lambda: commit_traces(self.target, cast(Place, self.out_where), run))
            merged.append(lambda: commit_consumption(self.target, cast(Place, self.out_where), run,
                                                     cast(HeldTable, self.held_consumption)))
        added = lake_sink.publish_tables(self.target, out, written, run, options.with_body, planned.parts, self.kept,
                                         merged)
        self.kept = {}  # each moved into its table: none left for OUT's publish
        summary["sink"] = f"iceberg: namespace {self.target.namespace} of {self.target.describe()}"
        summary["iceberg"] = {"catalog": self.target.describe(), "namespace": self.target.namespace,
                              "tables": added, "commit_seconds": round(time.time() - started, 3)}


SINKS = {sink.name: sink for sink in (ParquetSink, IcebergSink, NoopSink)}


@dataclass(frozen=True)
class SinkChoice:
    """--sink and what goes with it, as objects (jobs/cli.py sink_choice): the sink's class, the layout
    (jobs/output/layouts.py), the catalog's arguments (iceberg_sink.CatalogArgs), whether the run continues from the
    lake (`--starting-offsets iceberg`)."""

    kind: type[Sink] = ParquetSink
    layout: Normalized | Wide = NORMALIZED
    catalog: lake_sink.CatalogArgs = lake_sink.CatalogArgs()
    continuing: bool = False


def sink_of(choice: SinkChoice, brokers: Sequence[Broker]) -> tuple[Sink, str | None]:
    """(the run's sink, made once from the command line's SinkChoice by its class, the --starting-offsets it
    reads before the plan: None, the command line's)."""
    return choice.kind.of(choice, brokers)

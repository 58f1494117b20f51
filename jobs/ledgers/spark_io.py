"""What the driver's Spark steps share (the timer ledger, jobs/ledgers/timer.py; the POP ledger,
jobs/ledgers/pop.py): the tasks' event parts read by Spark where the commit left them, a table written by Spark's
writer into the temporary OUT without its marker files, and the (files, rows, bytes) OUT's summary gives it."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from jobs.parquet_files import parquet_options
from schemas.arrow_schemas import spark_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def spark_path(uri: str) -> str:
    """A path or URI as Spark's Hadoop filesystems name it (S3 is s3a:// there, s3:// for pyarrow)."""
    return "s3a://" + uri[len("s3://"):] if uri.startswith("s3://") else uri


def read_events(spark: SparkSession, schema: pa.Schema, base: str, output: str,
                event_files: Sequence[str] = ()) -> DataFrame:
    """A DataFrame (Arrow `schema`) of the tasks' parts of `output` under the temporary OUT `base` (a URI), or of
    `event_files` (relative to it: an object store's attempts, each read where it is, never copied)."""
    paths = [f"{base}/{f}" for f in event_files] or [f"{base}/{output}"]
    return spark.read.schema(spark_schema(schema)).parquet(*(spark_path(p) for p in paths))


def write_table(frame: DataFrame, base: str, where: tuple[pafs.FileSystem, str], output: str) -> None:
    """`frame` written by Spark as `output` under the temporary OUT (`base` its URI, `where` its (filesystem,
    path)), zstd like the tasks' parts, without Spark's _SUCCESS and checksums (OUT's own _SUCCESS says the run is
    whole)."""
    fs, root = where
    frame.write.option("compression", "zstd").parquet(spark_path(f"{base}/{output}"))
    for info in fs.get_file_info(pafs.FileSelector(f"{root}/{output}")):
        if info.base_name.startswith(("_", ".")):
            fs.delete_file(info.path)


def remove(fs: pafs.FileSystem, path: str) -> None:
    """A folder removed when it is there (the events once paired)."""
    if fs.get_file_info(path).type != pafs.FileType.NotFound:
        fs.delete_dir(path)


def sizes(fs: pafs.FileSystem, path: str) -> tuple[int, int, int]:
    """(files, rows, bytes) of a Parquet table's folder (rows read from the footers)."""
    files = [i for i in fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
             if i.type == pafs.FileType.File and i.base_name.endswith(".parquet")]
    rows = 0
    for info in files:
        with fs.open_input_file(info.path) as f:
            rows += pq.ParquetFile(f).metadata.num_rows
    return len(files), rows, sum(i.size for i in files)


def write_empty_part(where: tuple[pafs.FileSystem, str], output: str, schema: pa.Schema) -> None:
    """`output` under the temporary OUT (`where`: its filesystem and path) as a table of no row (part-empty.parquet):
    a ledger with nothing to say is still a table a reader can load."""
    fs, root = where
    fs.create_dir(f"{root}/{output}", recursive=True)
    with fs.open_output_stream(f"{root}/{output}/part-empty.parquet") as stream:
        pq.write_table(schema.empty_table(), stream, **parquet_options(schema))


def write_ledger_table(
        spark: SparkSession, out_uri: str, where: tuple[pafs.FileSystem, str], written: dict[str, tuple[int, int, int]],
        events: Mapping[str, pa.Schema], output: str, schema: pa.Schema, fold: Callable[[DataFrame], DataFrame],
        merge: Callable[[DataFrame, DataFrame], DataFrame], count: Callable[[DataFrame], list[dict[str, Any]]],
        held: DataFrame | None = None, event_files: Sequence[str] = ()
) -> tuple[dict[str, tuple[int, int, int]], list[dict[str, Any]]]:
    """One ledger's Spark step after the stage, the same for every ledger: its committed `events` (an Arrow schema
    by name: {name: schema}) folded into rows (`fold(DataFrame) -> DataFrame`), merged with what a table `held`
    (`merge(held, night)`), written as OUT/<output>/ with Spark's writer (a table of no row when there is none),
    counted (`count(DataFrame of the written rows) -> rows`), the events removed. Returns ({output: (files, rows,
    bytes)}, the counts). `written`: the sink's {output: (files, rows, bytes)}; `where`: OUT's (filesystem, path);
    `event_files`: the events' parts where the commit left them (an object store's attempts, read where they are)."""
    (name, event_schema), = events.items()
    fs, root = where
    base = out_uri.rstrip("/")
    night = None
    if written.pop(name, (0, 0, 0))[1]:
        night = fold(read_events(spark, event_schema.append(pa.field("broker", pa.string())), base, name, event_files))
    rows = night if held is None else held if night is None else merge(held, night)
    counts = []
    if rows is None:
        write_empty_part(where, output, schema)
    else:
        write_table(rows, base, where, output)
        counts = count(read_events(spark, schema, base, output))
    remove(fs, f"{root}/{name}")
    return {output: sizes(fs, f"{root}/{output}")}, counts

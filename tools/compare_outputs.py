"""Compare two replay outputs: the same rows in matched/, messages/ and audit/*, and the same summary.json.

    python tools/compare_outputs.py OUT_A OUT_B

Parquet parts are read with pyarrow.dataset (hive partitioning), sorted on every non-nested column and
compared as tables (file layout and row order may differ); summary.json is compared whole, except
timings (`*_seconds`), the run's id (`run`: every run has its own) and the `store` path when the two runs spelt it
differently. Exit 0 when identical."""
import json
import os
import sys

import pyarrow as pa
import pyarrow.dataset as ds

PARTS = ("matched", "messages", "audit/collisions", "audit/bitmaps", "audit/corrupt")


def sorted_rows(path):
    table = ds.dataset(path, format="parquet", partitioning="hive").to_table()
    keys = [(f.name, "ascending") for f in table.schema if not pa.types.is_nested(f.type)]
    return table.sort_by(keys).combine_chunks()


def compare_part(a, b, part):
    pa_, pb = os.path.join(a, part), os.path.join(b, part)
    if not os.path.exists(pa_) and not os.path.exists(pb):  # written only when there are rows
        print(f"  {part}: absent from both")
        return []
    if not os.path.exists(pa_) or not os.path.exists(pb):
        return [f"{part}: missing in {pa_ if not os.path.exists(pa_) else pb}"]
    ta, tb = sorted_rows(pa_), sorted_rows(pb)
    if ta.schema.remove_metadata() != tb.schema.remove_metadata():
        return [f"{part}: schemas differ:\n{ta.schema}\n---\n{tb.schema}"]
    if ta.num_rows != tb.num_rows:
        return [f"{part}: {ta.num_rows} rows against {tb.num_rows}"]
    if not ta.equals(tb.cast(ta.schema)):
        ra, rb = ta.to_pylist(), tb.to_pylist()
        first = next((i for i, (x, y) in enumerate(zip(ra, rb)) if x != y), None)
        where = "" if first is None else f", first at row {first}:\n{ra[first]}\n{rb[first]}"
        return [f"{part}: the rows differ{where}"]
    print(f"  {part}: {ta.num_rows} rows, identical")
    return []


def load_summary(out):
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        return json.load(f)


def compare_summaries(a, b):
    sa, sb = (load_summary(d) for d in (a, b))
    for summary in (sa, sb):
        for key in [k for k in summary if k.endswith("_seconds") or k == "run"]:
            del summary[key]  # how long a run took, and which run it was, are no result
    if sa.get("store") != sb.get("store"):
        print(f"  summary.json: store {sa.get('store')} / {sb.get('store')} (paths: not compared)")
        for summary in (sa, sb):
            summary.pop("store", None)
    if sa != sb:
        keys = sorted(k for k in set(sa) | set(sb) if sa.get(k) != sb.get(k))
        return [f"summary.json differs in {keys}"]
    print(f"  summary.json: identical ({len(sa['subscriptions'])} subscriptions)")
    return []


def main(argv):
    a, b = argv
    problems = [p for part in PARTS for p in compare_part(a, b, part)] + compare_summaries(a, b)
    for p in problems:
        print(p, file=sys.stderr)
    print(f"compare: {'identical' if not problems else f'{len(problems)} difference(s)'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env bash
# `make run`: replay the generated sample store on local Spark with the sample subscriptions.
set -euo pipefail
store=$1
out=$2
rm -rf "$out"
.venv/bin/spark-submit --properties-file /dev/null jobs/replay.py --store "$store" --out "$out" \
  --subscriptions conf/sample_subscriptions.json --master "local[2]"
echo "matched messages: $out/matched (Parquet, partitioned by group and topic); audits: $out/audit; summary: $out/summary.json"

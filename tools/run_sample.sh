#!/usr/bin/env bash
# `make run`: replay the generated sample store on local Spark with the sample subscriptions.
set -euo pipefail
store=$1
out=$2
rm -rf "$out"
.venv/bin/spark-submit --master "local[2]" jobs/replay.py --store "$store" --out "$out" \
  --subscriptions conf/sample_subscriptions.json
echo "matched rows: $out/matched (Parquet: group, topic, offsets, ids); messages once: $out/messages/topic=T; audits: $out/audit; summary: $out/summary.json"

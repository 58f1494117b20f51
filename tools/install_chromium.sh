#!/usr/bin/env bash
# `make browser`: Debian's chromium package, for the report's browser tests (tests/jobs/test_report.py), and
# Debian's fonts-noto-cjk, so that CJK topic and tag names (订单Topic) show as glyphs, not boxes. A fresh
# machine has Python and Java only; apt-get needs root, so sudo is used when this is not root.
set -euo pipefail
as_root=()
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "install_chromium: not root and no sudo: install Debian's chromium" >&2; exit 1; }
    as_root=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq chromium fonts-noto-cjk
command -v chromium

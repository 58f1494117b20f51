"""Every join the README and docs/ show between matched (or collisions) and messages names `broker`: commit-log
offsets repeat across a cluster's brokers, so a join on `(topic, commitlog_offset)` alone pairs each row of one
broker with another broker's message too (a cluster's output double-counts)."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PY_JOIN = re.compile(r"\.join\([^)]*\[([^\]]*commitlog_offset[^\]]*)\]")
SQL_ON = re.compile(r"\bJOIN\b[^;]*?\bON\b([^;]*?commitlog_offset[^;]*?)(?:\bWHERE\b|;|$)", re.I | re.S)
PROSE = re.compile(r"`\(([^`]*commitlog_offset)\)` joins")


def _joins(text):
    return [m.group(1) for pattern in (PY_JOIN, SQL_ON, PROSE) for m in pattern.finditer(text)]


def test_the_checker_finds_a_join_without_broker():
    assert _joins('m.join(msgs, ["topic", "commitlog_offset"])') == ['"topic", "commitlog_offset"']
    assert _joins("JOIN messages x ON x.topic = m.topic AND x.commitlog_offset = m.commitlog_offset WHERE 1")


def test_every_join_of_the_docs_names_the_broker():
    found = {(path.name, join) for path in DOCS for join in _joins(path.read_text(encoding="utf-8"))}
    assert found, "no join found: the patterns no longer match the docs"
    assert [f for f in sorted(found) if "broker" not in f[1]] == []

"""Every example in the README and in docs/ runs, on fixture store_a, so that a snippet broken by a change fails
`make test`.

README.md and every docs/**/*.md are read when the tests are collected (a test per block, named FILE:LINE).
Their code blocks (lines indented by four spaces after a blank line, or fenced with ```) are cut at blank lines
into pieces, and each piece is one of these kinds:

- SQL: it starts with CREATE, SELECT or WITH, or its fence says sql. Each statement runs with `spark.sql`.
- Python: one of its lines starts with `import`, `from X import`, `NAME = ` or `NAME.NAME`, or its fence says
  python. It runs with `spark` bound.
- a command: every line starts with `.venv/bin/python -m` (the tools that need no Spark: jobs.dump,
  jobs.explain). Each runs with the interpreter of the tests; a pipe into `head` is left out, so the
  whole output is read.
- a job: a line starts with `.venv/bin/spark-submit jobs/replay.py`: it runs on store_a (its `--out` a new
  folder) and must exit 0.
- job options: any other line that runs `replay.py` (a cluster's spark-submit, the crontab line): its
  arguments must parse (jobs.cli.parse_replay_args), so a renamed or removed option fails; it is not run.
- not run: other commands (make targets, cluster set-ups) and text (program output, explanations).

Comment lines do not decide a kind. The pieces of a block run in order, in the tests' Spark session (not a
new one: Spark 4.3 lets a new session neither find nor register a data source its parent registered), with
a new Python namespace per block; the temporary views a block creates are dropped after it.
The inline calls of the project's modules (`schemas.read_messages(store_dir)`, ...) run too, and every relative link
between these files (`[memory.md](memory.md#...)`) must name a file and a heading that exist.

Placeholders become fixture paths: `/data/broker-a/store`, `STORE` and `store_dir` are store_a's store;
a quoted `OUT/...` is one run of the job on store_a with store_a's registrations.json (`subs.json`,
`subscriptions.json`) and the README's example group G_SQL_PRICE (`price > 100.0` on 订单Topic), so
that the join finds rows; the explain example's `G T Q O` are the README's own collision (G_TAG_Aa_collide,
TopicTest, queue 0, offset 4); an inline call's `expr` and `props` are `price > 100.0` and a message's
properties `{"price": "512.40"}`.

What must hold: no error, and a query (a Python piece that ends with a DataFrame, a SELECT) returns rows,
a command writes output, an inline call returns something that is not empty or false."""
import ast
import importlib
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
SQL_START = re.compile(r"(CREATE|SELECT|WITH)\b", re.I)
PYTHON_LINE = re.compile(r"(import \w|from [\w.]+ import |[A-Za-z_]\w* = |[A-Za-z_]\w*\.[A-Za-z_])")
COMMAND = ".venv/bin/python -m "
JOB = ".venv/bin/spark-submit jobs/replay.py "
JOB_SCRIPT = re.compile(r"(^|\s)\S*replay\.py\s")
INLINE_CALL = re.compile(r"`((?:schemas|filtering|jobs)\.[\w.]+\([^`]*\))`")
EXPLAIN_EXAMPLE = {"G": "G_TAG_Aa_collide", "T": "TopicTest", "Q": "0", "O": "4"}
PRICE = ("G_SQL_PRICE", "订单Topic", "SQL92", "price > 100.0")
INLINE_NAMES = {"expr": "price > 100.0", "props": {"price": "512.40"}}


def markdown_files():
    """README.md and the docs, the files whose examples run."""
    return [README] + sorted(DOCS.rglob("*.md"))


def code_blocks(text):
    """[(line number, fence language or None, [lines])] of a markdown file's code blocks."""
    lines, blocks, i = text.splitlines(), [], 0
    while i < len(lines):
        fence = re.match(r"\s*```(\w*)", lines[i])
        if fence:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip().startswith("```")), len(lines))
            blocks.append((i + 2, fence.group(1).lower() or None, lines[i + 1:end]))
            i = end + 1
        elif lines[i].startswith("    ") and lines[i].strip() and (i == 0 or not lines[i - 1].strip()):
            end = i
            while end < len(lines) and (lines[end].startswith("    ") or not lines[end].strip()):
                end += 1
            blocks.append((i + 1, None, [line[4:] for line in lines[i:end]]))
            i = end
        else:
            i += 1
    return blocks


def pieces(lines):
    """The block's runs of non-blank lines."""
    out, piece = [], []
    for line in lines + [""]:
        if line.strip():
            piece.append(line)
        elif piece:
            out.append("\n".join(piece))
            piece = []
    return out


def kind(piece, language):
    """sql, python, command, or None (not run): the rules of the module's docstring."""
    if language in ("sql", "python", "py"):
        return "python" if language == "py" else language
    if language in ("text", "console", "output", "json"):
        return None
    lines = [line.strip() for line in commands(piece) if not line.strip().startswith(("#", "--"))]
    if not lines:
        return None
    if SQL_START.match(lines[0]):
        return "sql"
    if any(PYTHON_LINE.match(line) for line in lines):
        return "python"
    if all(line.startswith(COMMAND) for line in lines):
        return "command"
    if any(line.startswith(JOB) for line in lines):
        return "job"
    if any(JOB_SCRIPT.search(line) for line in lines):
        return "job options"
    return None


def commands(piece):
    """A piece's command lines, continuation lines joined."""
    return [line for line in piece.replace("\\\n", " ").splitlines() if line.strip()]


def examples():
    """pytest params, one per block of README.md or docs/ that holds something to run: [(kind, piece), ...],
    with the id FILE:LINE."""
    params = []
    for path in markdown_files():
        for line, language, lines in code_blocks(path.read_text(encoding="utf-8")):
            runnable = [(kind(p, language), p) for p in pieces(lines)]
            runnable = [(k, p) for k, p in runnable if k]
            if runnable:
                params.append(pytest.param(runnable, id=f"{path.relative_to(ROOT)}:{line}"))
    return params


def inline_calls():
    calls = {call for path in markdown_files() for call in INLINE_CALL.findall(path.read_text(encoding="utf-8"))}
    return [pytest.param(call, id=call) for call in sorted(calls)]


@pytest.fixture(scope="module")
def out(store_a, tmp_path_factory):
    """OUT of one run of the job on store_a (normalized layout, as the README's examples read it)."""
    path = tmp_path_factory.mktemp("readme") / "out"
    submit = Path(sys.executable).parent / "spark-submit"
    proc = subprocess.run([str(submit), "--master", "local[2]", str(ROOT / "jobs" / "replay.py"),
                           "--store", str(store_a / "store"), "--out", str(path),
                           "--subscriptions", str(store_a / "registrations.json"), "--subscription", *PRICE],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return path


def with_fixtures(code, store_a, out):
    """The code with the README's store and OUT paths replaced by the fixture's."""
    code = code.replace("/data/broker-a/store", str(store_a / "store"))
    return re.sub(r"""(['"])OUT(?=[/'"])""", lambda m: m.group(1) + str(out), code)


def run_python(code, spark, where):
    """Run a Python piece; when its last statement is an expression, return its value."""
    tree = ast.parse(code, where)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    namespace = {"spark": spark}
    exec(compile(tree, where, "exec"), namespace)
    return None if last is None else eval(compile(ast.Expression(last.value), where, "eval"), namespace)


def run_command(line, store_a):
    """Run one `.venv/bin/python -m ...` line with the placeholders filled in; its stdout."""
    args = shlex.split(line, comments=True)
    args = args[:args.index("|")] if "|" in args else args
    fill = {"STORE": str(store_a / "store"), "subs.json": str(store_a / "registrations.json"),
            "subscriptions.json": str(store_a / "registrations.json"), **EXPLAIN_EXAMPLE}
    args = [sys.executable] + [fill.get(a, a) for a in args[1:]]
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip(), f"{line}\n{proc.stderr[-2000:]}"
    return proc.stdout


def job_arguments(line):
    """The arguments a command line gives replay.py (up to a shell operator); a shell's `$(...)` is one word,
    and a `${VAR:+...}` that may expand to nothing is left out."""
    line = re.sub(r"\$\{[^}]*\}", "", re.sub(r"\$\([^)]*\)", "X", line))
    args = shlex.split(re.sub(r"(^|\s)#.*$", "", line))  # a comment starts a word (not #environment)
    start = next(i for i, a in enumerate(args) if a.endswith("replay.py")) + 1
    end = next((i for i, a in enumerate(args) if i >= start and a in ("|", "&&", "||", ";", ">")), len(args))
    return args[start:end]


def run_job(line, store_a, tmp_path):
    """Run a spark-submit line of the job (README or docs/) on store_a, its --out a new folder."""
    args = job_arguments(line)
    fill = {"STORE": str(store_a / "store"), "/data/broker-a/store": str(store_a / "store"),
            "subs.json": str(store_a / "registrations.json"), "subscriptions.json": str(store_a / "registrations.json")}
    args = [fill.get(a, a) for a in args]
    args[args.index("--out") + 1] = str(tmp_path / f"out-{len(list(tmp_path.iterdir()))}")
    submit = Path(sys.executable).parent / "spark-submit"
    proc = subprocess.run([str(submit), "--master", "local[2]", str(ROOT / "jobs" / "replay.py"), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert proc.returncode == 0, f"{line}\n{(proc.stdout + proc.stderr)[-2000:]}"


def parse_job_options(line):
    """A line of the README or docs/ that runs replay.py elsewhere (a cluster, cron): its options must still exist."""
    from jobs.cli import parse_replay_args

    try:
        parse_replay_args(job_arguments(line))
    except SystemExit as exc:
        pytest.fail(f"replay.py refuses the options of this example ({exc.code}): {line}")


@pytest.fixture
def session(spark):
    """The tests' session, without the temporary views a test created."""
    before = {t.name for t in spark.catalog.listTables() if t.isTemporary}
    yield spark
    for view in {t.name for t in spark.catalog.listTables() if t.isTemporary} - before:
        spark.catalog.dropTempView(view)


@pytest.mark.system
@pytest.mark.spark
@pytest.mark.parametrize("block", examples())
def test_readme_example_runs_on_the_fixture(block, session, store_a, out, request, tmp_path):
    where = request.node.callspec.id
    for piece_kind, piece in block:
        code = with_fixtures(piece, store_a, out)
        if piece_kind == "sql":
            for statement in filter(str.strip, code.split(";")):
                rows = session.sql(statement).collect()
                assert rows or not statement.strip().upper().startswith("SELECT"), f"{where}: no rows from {statement}"
        elif piece_kind == "python":
            value = run_python(code, session, where)
            if hasattr(value, "collect"):
                assert value.collect(), f"{where}: no rows from {piece.splitlines()[-1]}"
        elif piece_kind == "job":
            for line in commands(piece):
                if line.strip().startswith(JOB):
                    run_job(line.strip(), store_a, tmp_path)
        elif piece_kind == "job options":
            for line in commands(piece):
                if JOB_SCRIPT.search(line):
                    parse_job_options(line)
        else:
            for line in commands(piece):
                run_command(line, store_a)


@pytest.mark.parametrize("call", inline_calls())
def test_readme_inline_call_runs_on_the_fixture(call, store_a):
    dotted = call.split("(")[0].split(".")
    namespace = {"store_dir": str(store_a / "store"), **INLINE_NAMES}
    for i in range(1, len(dotted)):  # `filtering.sql92.parse` needs filtering.sql92 imported
        if importlib.util.find_spec(".".join(dotted[:i])) is not None:
            importlib.import_module(".".join(dotted[:i]))
    namespace[dotted[0]] = importlib.import_module(dotted[0])
    value = eval(call, namespace)
    assert value is not None and value is not False and (not hasattr(value, "__len__") or len(value)), call


def test_the_readme_has_examples_of_every_kind():
    """The extraction finds what the README and docs/ show: a change to their layout must not leave the examples
    untested. The README itself keeps a run of the job, the join (Python and SQL) and the commands."""
    params = examples()
    kinds = {k for param in params for k, _ in param.values[0]}
    assert kinds == {"sql", "python", "command", "job", "job options"}
    readme = {k for param in params if param.id.startswith("README.md:") for k, _ in param.values[0]}
    assert readme == {"sql", "python", "command", "job", "job options"}
    assert {param.id.split(":")[0] for param in params} > {"README.md"}, "no example found in docs/"
    assert len(inline_calls()) >= 3


def anchor(heading):
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_between_the_readme_and_docs_name_files_and_headings_that_exist():
    link = re.compile(r"\]\(([^)\s]+)\)")
    broken = []
    for path in markdown_files():
        for target in link.findall(path.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue  # http:, https:, mailto:
            name, _, fragment = target.partition("#")
            file = (path.parent / name).resolve() if name else path
            if not file.is_file():
                broken.append(f"{path.relative_to(ROOT)}: {target} (no such file)")
                continue
            if not fragment:
                continue  # a file (an image, another page) that exists
            headings = [line.lstrip("#") for line in file.read_text(encoding="utf-8").splitlines() if line[:1] == "#"]
            if fragment not in map(anchor, headings):
                broken.append(f"{path.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)
    assert (DOCS / "design.md").is_file() and "docs/design.md" in README.read_text(encoding="utf-8")

"""Every public function and method of the job's packages (jobs/, filtering/, schemas/) carries its annotations,
each parameter's and its return's (issue 61): `make lint`'s mypy checks the bodies of annotated functions only, so
one left bare would be one left unchecked. numba's kernels are typed by numba, not annotated."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("jobs", "filtering", "schemas")
NUMBA = {"njit", "jit", "intrinsic", "generated_jit", "overload", "vectorize", "guvectorize"}


def _numba(node):
    for d in node.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name in NUMBA:
            return True
    return False


def _api(body):
    """The functions of a module's or a class's body, and of its classes' (a function's own inner functions are
    its body, not an interface)."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node
        elif isinstance(node, ast.ClassDef):
            yield from _api(node.body)


def unannotated(source, path="<source>"):
    """["path:line name"] of the public functions and methods (dunders included) of `source` that lack a
    parameter's annotation (self and cls aside) or the return's."""
    out = []
    for node in _api(ast.parse(source).body):
        if _numba(node):
            continue
        if node.name.startswith("_") and not (node.name.startswith("__") and node.name.endswith("__")):
            continue
        args = node.args
        params = [a for a in args.posonlyargs + args.args + args.kwonlyargs if a.arg not in ("self", "cls")]
        params += [a for a in (args.vararg, args.kwarg) if a is not None]
        if node.returns is None or any(a.annotation is None for a in params):
            out.append(f"{path}:{node.lineno} {node.name}")
    return out


def test_a_public_function_without_its_annotations_is_found():
    source = ("def typed(a: int, *rest: str, **named: int) -> None: ...\n"
              "def no_return(a: int): ...\n"
              "def bare_param(a, b: int) -> int: ...\n"
              "def _private(a): ...\n"
              "class K:\n"
              "    def __init__(self, a): ...\n"
              "    def method(self) -> None: ...\n"
              "@njit\n"
              "def kernel(a): ...\n"
              "def outer() -> None:\n"
              "    def inner(a): ...\n")
    assert unannotated(source) == ["<source>:2 no_return", "<source>:3 bare_param", "<source>:6 __init__"]


def test_every_public_function_of_the_job_is_annotated():
    missing = [line for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
               for line in unannotated(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))]
    assert missing == []

"""A broker's store is resolved once (jobs/plan/brokers.py) and handed down as a (filesystem, path) pair: a
run's planning turns each store URI into a filesystem once, no module of schemas/, jobs/plan/ or jobs/task/ but
brokers.py does it, and no module but jobs/plan/units/choose.py compares the --units-from strings."""
import re
from pathlib import Path

from jobs.plan.brokers import brokers_of
from jobs.plan.cluster import plan_cluster
from jobs.settings import JobOptions
from schemas.store import storefs

ROOT = Path(__file__).resolve().parents[2]
RESOLVING = re.compile(r"storefs\.resolve\(|from_uri\(")
NAMES = "auto|consumequeue|commitlog|rocksdb"
COMPARED = re.compile(rf"""(==|!=)\s*["']({NAMES})["']|["']({NAMES})["']\s*(==|!=)""")


def _modules(*folders):
    return [p for folder in folders for p in sorted((ROOT / folder).rglob("*.py"))]


def test_a_run_resolves_each_store_once(store_cluster, monkeypatch):
    resolved = []
    real = storefs.resolve
    monkeypatch.setattr(storefs, "resolve", lambda uri: resolved.append(str(uri)) or real(uri))
    stores = [f"broker-a={store_cluster / 'broker-a' / 'store'}", f"broker-b={store_cluster / 'broker-b' / 'store'}"]
    brokers = brokers_of(stores)
    planned = plan_cluster(JobOptions(store=brokers[0].uri, subscription_files=(
        str(store_cluster / "registrations.json"),)), brokers)
    assert sorted(resolved) == sorted(b.uri for b in brokers)
    assert [p.plan.fs for _, p in planned.parts] == [b.fs for b in brokers]


PACKAGES = ("schemas", "jobs/plan", "jobs/task", "jobs/explain", "jobs/datasource")


def test_only_brokers_py_turns_a_uri_into_a_filesystem():
    found = [str(p.relative_to(ROOT)) for p in _modules(*PACKAGES)
             if RESOLVING.search(p.read_text(encoding="utf-8"))]
    assert sorted(found) == ["jobs/plan/brokers.py", "schemas/store/storefs.py"]


def test_only_the_choice_compares_the_units_from_strings():
    found = [str(p.relative_to(ROOT)) for p in _modules(*PACKAGES)
             if COMPARED.search(p.read_text(encoding="utf-8"))]
    assert found == []

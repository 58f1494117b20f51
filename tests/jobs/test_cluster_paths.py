"""On a master that is not local (YARN, Kubernetes, standalone) the executors may be other machines: before the
stage, the job checks that they see the store and OUT's directory (as over Spark Connect), so a local --out on
YARN fails in seconds with one line, not after the stage. The master is classified on a stand-in session; the
check itself runs as a real Spark task."""
from types import SimpleNamespace

import pytest

from jobs import replay
from jobs.errors import UsageError


def _session(master):
    return SimpleNamespace(sparkContext=SimpleNamespace(master=master))


@pytest.mark.parametrize("master, elsewhere", [("local[2]", False), ("local-cluster[2,1,1024]", False),
                                               ("yarn", True), ("spark://10.0.0.1:7077", True),
                                               ("k8s://https://api:6443", True)])
def test_executors_may_be_elsewhere_on_a_master_that_is_not_local(master, elsewhere):
    assert replay.executors_elsewhere(_session(master)) == elsewhere


def test_a_path_the_executors_do_not_see_is_refused_naming_it(monkeypatch):
    abandoned = []
    run = SimpleNamespace(tmp_uri="/home/me/out.tmp-1234abcd", abandon=lambda: abandoned.append(True))
    planned = SimpleNamespace(parts=[(SimpleNamespace(uri="/data/store"), None)])
    monkeypatch.setattr(replay, "unseen_paths", lambda spark, paths: [p for p in paths if p[0] == "--out"])
    with pytest.raises(UsageError, match=r"^the executors of master yarn do not see --out /home/me: store and OUT"):
        replay.check_server_sees(_session("yarn"), run, planned, SimpleNamespace(commitlog=()))
    assert abandoned == [True]


@pytest.mark.spark
def test_the_executors_check_each_path_in_a_task_of_their_own(spark, tmp_path):
    """The check itself is a Spark task that looks at each path on the executor's side (here the same machine:
    a folder that is there, one that is not, a URI left to each side)."""
    from jobs.task.stage import unseen_paths

    (tmp_path / "store").mkdir()
    paths = [("--store", str(tmp_path / "store")), ("--out", str(tmp_path / "gone")),
             ("--commitlog", f"file://{tmp_path / 'store'}"), ("--out", "s3://bucket/out")]
    assert unseen_paths(spark, paths) == [("--out", str(tmp_path / "gone"))]

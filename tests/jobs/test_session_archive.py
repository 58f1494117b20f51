"""The class-data archive a run's JVM writes is marked as a whole run's only by a run that got through its stage
(the venv's spark-submit keeps only a marked one: an archive of a run stopped by a usage error holds few classes,
and every later run loaded the rest slowly)."""
from jobs.runtime.session import ARCHIVE_MADE, archive_of_a_whole_run


def test_a_run_that_writes_the_archive_marks_it_beside_it(tmp_path):
    made = tmp_path / "spark-1.jsa.4242"
    archive_of_a_whole_run({ARCHIVE_MADE: str(made)})
    assert [p.name for p in tmp_path.iterdir()] == ["spark-1.jsa.4242.stage"]


def test_a_run_that_writes_no_archive_marks_nothing(tmp_path):
    archive_of_a_whole_run({})
    archive_of_a_whole_run({ARCHIVE_MADE: str(tmp_path / "gone" / "spark-1.jsa.4242")})  # unwritable: no error
    assert list(tmp_path.iterdir()) == []

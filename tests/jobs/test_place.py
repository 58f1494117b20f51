"""A folder a task creates inside the run's temporary OUT never makes that temporary OUT again: a task of a
stopped run still writing once the driver removed it (seen in CI: a SIGINT'd run left OUT.tmp-* behind) fails."""
import pytest

from jobs.output.place import Place


def test_a_folder_in_place_is_made_level_by_level_under_an_existing_root(tmp_path):
    root = tmp_path / "out.tmp-1"
    root.mkdir()
    Place.of(str(root)).create_folder_in_place("_attempts/0-1-2/matched")
    Place.of(str(root)).create_folder_in_place("_attempts/0-1-2/matched")  # again: already there is fine
    assert (root / "_attempts" / "0-1-2" / "matched").is_dir()


def test_a_folder_in_place_is_not_made_once_the_root_is_gone(tmp_path):
    root = tmp_path / "out.tmp-1"
    with pytest.raises(FileNotFoundError):
        Place.of(str(root)).create_folder_in_place("_attempts/0-1-2/matched")
    assert list(tmp_path.iterdir()) == []

"""The test harness's live servers leave no data directory behind (tests/server.py): a day of local runs
once left gigabytes of them in /tmp."""

from tests import server as live


def test_made_data_dirs_are_removed_and_a_callers_own_is_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(live, "_made_data_dirs", [])  # this test's alone: other servers of the run keep theirs
    made = live.LiveServer(database_url="", migrated=False)
    (made.data_dir / "db.sqlite3").write_bytes(b"x")
    (made.data_dir / "uploads").mkdir()
    own = live.LiveServer(data_dir=str(tmp_path), database_url="", migrated=False)
    (own.data_dir / "db.sqlite3").write_bytes(b"x")

    assert made.data_dir.is_dir() and made.data_dir in live._made_data_dirs
    live.remove_made_data_dirs()

    assert not made.data_dir.exists()
    assert (tmp_path / "db.sqlite3").exists()  # a directory the caller brought is the caller's
    assert live._made_data_dirs == []

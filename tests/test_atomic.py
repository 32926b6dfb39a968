"""Crash-safe writes (fl_gym/atomic.py)."""

from __future__ import annotations

import errno
import os
import re
import threading

import pytest

from fl_gym.atomic import read_json, write_json, write_text, write_via


def test_result_files_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        path = write_json(tmp_path / "r.json", {"a": 1})
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644


def test_a_damaged_result_file_is_named_with_the_remedy(tmp_path):
    """It was json's JSONDecodeError, a traceback from whichever command read it back."""
    path = write_json(tmp_path / "scores.json", {"a": 1})
    assert read_json(path) == {"a": 1}
    path.write_text('{"a": 1')  # cut short by another writer
    damaged = rf"^{re.escape(str(path))} is damaged \(Expecting .*, line 1\); allowed: JSON as fl-gym"
    with pytest.raises(ValueError, match=damaged + r" writes it \(remove the file"):
        read_json(path)
    path.write_bytes(b'{"a": \xff}')  # bytes of no text: was the UnicodeDecodeError's traceback
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))} is damaged \(not UTF-8 text at byte 6\)"):
        read_json(path)


def test_a_result_file_without_what_its_reader_reads_is_named_as_damaged(tmp_path):
    """``benchmark report`` on a scores.json without 'seed' was a ``KeyError`` traceback."""
    path = write_json(tmp_path / "scores.json", {"algo": "ppo", "seed": 0})
    assert read_json(path, ("algo", "seed")) == {"algo": "ppo", "seed": 0}
    for content, missing in (({"algo": "ppo"}, "seed"), ([1], "algo")):
        write_json(path, content)
        damaged = rf"^{re.escape(str(path))} is damaged \(no '{missing}'\); allowed: JSON as fl-gym writes it"
        with pytest.raises(ValueError, match=damaged):
            read_json(path, ("algo", "seed"))


def _full(*_):
    raise OSError(errno.ENOSPC, "No space left on device")  # as a write past a full disk: no file named


def test_a_full_disk_names_the_file_and_leaves_the_old_one_whole(tmp_path, monkeypatch):
    path = write_json(tmp_path / "r.json", {"a": 1})
    monkeypatch.setattr(os, "fsync", _full)
    with pytest.raises(OSError) as raised:
        write_json(path, {"a": 2})
    assert (raised.value.errno, raised.value.filename) == (errno.ENOSPC, str(path))
    assert read_json(path) == {"a": 1} and [p.name for p in tmp_path.iterdir()] == ["r.json"]
    with pytest.raises(OSError) as raised:
        write_via(tmp_path / "m.zip", _full)  # a model's or a plot's writer
    assert raised.value.filename == str(tmp_path / "m.zip")
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_a_full_disk_is_one_line_on_the_command_line(tmp_path, monkeypatch, capsys):
    from fl_gym.training.cli import main

    monkeypatch.setattr(os, "fsync", _full)
    code = main(["compare", "FLAggregate-v0", "--policies", "fedavg", "--seeds", "1", "--rounds", "1",
                 "--out", str(tmp_path), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"fl-gym: error: {tmp_path / 'episodes'}/")  # the first file it writes
    assert "could not be written (No space left on device)" in err


def test_a_writers_file_reaches_the_disk_before_it_takes_its_name(tmp_path, monkeypatch):
    """A checkpoint renamed before its data is on disk could be empty after the machine crashed."""
    calls = []
    fsync, replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append("fsync"), fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (calls.append("replace"), replace(a, b))[1])
    path = write_via(tmp_path / "m.zip", lambda tmp: tmp.write_bytes(b"model"))
    assert calls == ["fsync", "replace"] and path.read_bytes() == b"model"


def test_of_processes_creating_one_file_at_once_exactly_one_writes_it(tmp_path):
    """Eight threads race to create ``config.yml``: one writes it whole, seven get ``FileExistsError``."""
    path, start, outcomes = tmp_path / "run" / "config.yml", threading.Barrier(8), {}

    def create(i: int) -> None:
        start.wait()
        try:
            write_text(path, f"writer {i}\n" * 1000, new=True)
            outcomes[i] = "wrote"
        except FileExistsError:
            outcomes[i] = "refused"

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    [winner] = [i for i, outcome in outcomes.items() if outcome == "wrote"]
    assert len(outcomes) == 8 and path.read_text() == f"writer {winner}\n" * 1000
    assert sorted(p.name for p in path.parent.iterdir()) == ["config.yml"]  # no temporary file left


def test_a_new_file_is_made_whole_where_the_file_system_has_no_hard_links(tmp_path, monkeypatch):
    def no_links(src, dst):
        raise PermissionError(errno.EPERM, "Operation not permitted", src, None, dst)

    monkeypatch.setattr(os, "link", no_links)
    write_text(tmp_path / "config.yml", "first\n", new=True)
    with pytest.raises(FileExistsError):
        write_text(tmp_path / "config.yml", "second\n", new=True)
    assert [p.name for p in tmp_path.iterdir()] == ["config.yml"]
    assert (tmp_path / "config.yml").read_text() == "first\n"


def test_a_new_file_that_could_not_be_filled_leaves_its_name_free(tmp_path, monkeypatch):
    def no_links(src, dst):
        raise PermissionError(errno.EPERM, "Operation not permitted", src, None, dst)

    def full_disk(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "link", no_links)
    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(OSError, match="No space left on device: .*config.yml"):
        write_text(tmp_path / "config.yml", "first\n", new=True)
    assert list(tmp_path.iterdir()) == []

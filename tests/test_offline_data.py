"""``fl-gym data prepare``: the conversions and checks, on archives made here (no network)."""

from __future__ import annotations

import gzip
import hashlib
import pickle
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

from fl_gym.data import offline


def _wheel(path, splits):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("mnist/data/mnist.pkl.gz", gzip.compress(pickle.dumps(splits)))
    return path


def _splits():
    rng = np.random.default_rng(0)
    return tuple((rng.integers(0, 256, (n, 784)) / 256.0, rng.integers(0, 10, n)) for n in (5, 2, 3))


def test_idx_bytes_by_hand():
    images = offline.idx_images(np.full((2, 784), 0.5))
    assert images[:16] == struct.pack(">HBBIII", 0, 8, 3, 2, 28, 28) and set(images[16:]) == {128}
    assert offline.idx_labels(np.array([3, 7])) == bytes([0, 0, 8, 1, 0, 0, 0, 2, 3, 7])


def test_mnist_from_a_wheel_is_written_in_torchvisions_layout(tmp_path):
    wheel = _wheel(tmp_path / "w.whl", _splits())
    files = {"train-images-idx3-ubyte": 7, "train-labels-idx1-ubyte": 7, "t10k-images-idx3-ubyte": 3,
             "t10k-labels-idx1-ubyte": 3}
    train, valid, test = _splits()
    expected = {"train-images-idx3-ubyte": offline.idx_images(np.concatenate([train[0], valid[0]])),
                "train-labels-idx1-ubyte": offline.idx_labels(np.concatenate([train[1], valid[1]])),
                "t10k-images-idx3-ubyte": offline.idx_images(test[0]),
                "t10k-labels-idx1-ubyte": offline.idx_labels(test[1])}
    md5 = {"MNIST": {f: hashlib.md5(b).hexdigest() for f, b in expected.items()}}
    offline.mnist_from_wheel(wheel, tmp_path / "root", hashlib.sha256(wheel.read_bytes()).hexdigest(), md5)
    assert offline.ready(tmp_path / "root", "MNIST")
    for name, count in files.items():
        data = (tmp_path / "root" / "MNIST" / "raw" / name).read_bytes()
        assert data == expected[name] and struct.unpack(">I", data[4:8])[0] == count


def test_a_wheel_or_file_that_is_not_the_pinned_one_is_refused(tmp_path):
    wheel = _wheel(tmp_path / "w.whl", _splits())
    with pytest.raises(ValueError, match="sha256 differs"):
        offline.mnist_from_wheel(wheel, tmp_path / "root")  # the real pin: this wheel is not it
    with pytest.raises(ValueError, match="md5 differs"):
        offline.mnist_from_wheel(wheel, tmp_path / "root", hashlib.sha256(wheel.read_bytes()).hexdigest())
    assert not (tmp_path / "root" / "MNIST").exists()  # nothing written


def test_prepare_into_a_folder_it_cannot_write_is_one_line_before_any_fetch(tmp_path, capsys):
    from fl_gym.training.cli import main

    taken = tmp_path / "a-file"
    taken.write_text("")
    assert main(["data", "prepare", str(taken)]) == 2  # was NotADirectoryError's traceback
    err = capsys.readouterr().err
    assert f"root='{taken}' cannot be written" in err and len(err.strip().splitlines()) == 1


def test_a_prepare_cut_short_while_writing_leaves_no_file_that_reads_as_ready(tmp_path, monkeypatch):
    """``ready`` reads the files' presence: one cut short under its own name was never written again."""
    files = {name: bytes([i]) * 64 for i, name in enumerate(offline.MD5["MNIST"])}
    md5 = {"MNIST": {f: hashlib.md5(b).hexdigest() for f, b in files.items()}}
    last, write = list(files)[-1], Path.write_bytes

    def cut(path, data):
        if last in path.name:  # Ctrl-C halfway through the last file
            write(path, data[:10])
            raise KeyboardInterrupt
        return write(path, data)

    monkeypatch.setattr(Path, "write_bytes", cut)
    with pytest.raises(KeyboardInterrupt):
        offline.write_checked(tmp_path, "MNIST", files, md5)
    raw = tmp_path / "MNIST" / "raw"
    assert not offline.ready(tmp_path, "MNIST")
    assert sorted(p.name for p in raw.iterdir()) == sorted(f for f in files if f != last)  # no partial file
    monkeypatch.undo()
    offline.write_checked(tmp_path, "MNIST", files, md5)  # prepared again: whole
    assert offline.ready(tmp_path, "MNIST") and (raw / last).read_bytes() == files[last]

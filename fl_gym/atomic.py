"""Crash-safe file writes: write a temporary file next to the target, then rename it over."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from fl_gym.validation import UserError, require


def write_text(path: str | Path, text: str, *, new: bool = False) -> Path:
    """Write ``text`` to ``path`` atomically (readers see the old file or the new one, never half).

    ``new``: ``path`` must not exist yet (``FileExistsError`` where it does). Of two processes
    creating it at once exactly one does; a check for the file, then a write, would let both
    through, and the second would overwrite the first's.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # as open() would create it (mkstemp makes it private)
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        (_link if new else os.replace)(tmp, path)
    except BaseException as err:
        raise _naming(err, path) from err
    finally:
        Path(tmp).unlink(missing_ok=True)  # gone after a replace; a link leaves the temporary name
    return path


def _link(tmp: str, path: Path) -> None:
    """Give the file ``tmp`` the name ``path`` too, unless that name exists (``FileExistsError``).

    A file system without hard links (FAT) has the name claimed empty first, then filled (or
    freed again where the filling fails).
    """
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
        try:
            os.replace(tmp, path)
        except BaseException:
            path.unlink(missing_ok=True)
            raise


def _naming(err: BaseException, path: Path) -> BaseException:
    """``err``, or for an ``OSError`` that names no file (a full disk, met mid-write) one naming ``path``."""
    if isinstance(err, OSError) and err.filename is None and err.errno is not None:
        return OSError(err.errno, err.strerror, str(path))
    return err


def _umask() -> int:
    """The process's umask (read by setting it and setting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def require_writable(folder: str | Path, name: str) -> Path:
    """``folder``, created, after a test write: output that cannot be written fails before the work."""
    require(str(folder) != "", name, "", "a folder path")  # '' would quietly mean the working folder
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".fl-gym-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise UserError(f"{name}={str(folder)!r} cannot be written ({err.strerror or err}); allowed: a "
                        "folder you can write to") from err
    return folder


def write_via(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Atomically create ``path`` with a writer that takes a path (``model.save``, ``fig.savefig``).

    The temporary file keeps ``path``'s suffix, since such writers pick the format from it. It
    reaches the disk before the rename, as :func:`write_text`'s does: renamed first, a crash of
    the machine could leave a checkpoint empty under its final name.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    try:
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        raise _naming(err, path) from err
    return path


def save_atomic(model: Any, path: str | Path) -> Path:
    """``model.save`` (SB3) through a temporary file, so a crash never leaves a half-written zip."""
    return write_via(path, model.save)


def write_json(path: str | Path, data: Any, *, new: bool = False) -> Path:
    """Atomically write ``data`` as indented JSON (``new``: as :func:`write_text`'s)."""
    return write_text(path, json.dumps(data, indent=2, default=_jsonable) + "\n", new=new)


def read_json(path: str | Path, keys: Sequence[str] = ()) -> Any:
    """Read JSON written by :func:`write_json`; a damaged file (written by something else) is named.

    ``keys``: what the caller reads, so that an object without them (another tool's file, one
    edited by hand) is named as damaged too, rather than a ``KeyError`` deep in the caller.
    """
    with open(path, encoding="utf-8") as f:
        try:
            value = json.load(f)
        except json.JSONDecodeError as err:  # write_json's files are whole: another writer damaged it
            damaged(path, f"{err.msg}, line {err.lineno}")
        except UnicodeDecodeError as err:  # bytes no text file holds
            damaged(path, f"not UTF-8 text at byte {err.start}")
    require_keys(path, value, keys)
    return value


def require_keys(path: str | Path, value: Any, keys: Sequence[str]) -> None:
    """Name ``path`` (a file, or a part of one) as damaged unless ``value`` is an object with ``keys``."""
    missing = [k for k in keys if not (isinstance(value, dict) and k in value)]
    if missing:
        damaged(path, f"no {missing[0]!r}")


def damaged(path: str | Path, why: str) -> NoReturn:
    """Refuse the file ``path`` (or a part of one) that does not hold what fl-gym wrote, saying ``why``."""
    raise UserError(f"{path} is damaged ({why}); allowed: JSON as fl-gym writes it (remove the file, and the "
                    "command that wrote it writes it again)") from None


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")

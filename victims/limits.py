"""Limits on what a user's files may declare, checked *before* anything is read: a few MB of zip
can declare gigabytes (a decompression bomb), and an .npy header can declare any shape.

- `.npz` data (`victim.data.path`): the arrays together may declare at most `data_limit()` bytes
  counted as float64 (what they become): 2 GiB, and at most a sixth of the machine's memory (a
  run holds several copies while it splits and normalises them). Each .npy header must be
  readable, of a plain numeric dtype (no objects, no structured records), and declare no more data
  than its zip member holds.
- Model files (`victim.model.path`): a zip archive (torch.save's format) may declare at most
  `model_limit()` bytes in all its members: 4 GiB, and at most a third of the machine's memory; no
  member may inflate more than MAX_INFLATION times (torch.save writes its archives uncompressed).
  Other files are their size on disk.

A file over a limit is BadInput (exit 2) naming the file, what it declares and the limit.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

from victims.errors import BadInput

GIB = 1024**3
MAX_DATA_BYTES = 2 * GIB  # arrays of a user's .npz, as float64
MAX_MODEL_BYTES = 4 * GIB  # members of a model archive
MAX_INFLATION = 100  # how much one zip member may expand (deflate of real weights: ~1.1x)
SMALL = 1024**2  # members below this are never called bombs
READ_AT_CHECK = 256 * 1024**2  # model files declaring up to this are read whole by the checks


def machine_memory() -> int:
    """Bytes of memory this process may use: physical memory, or a smaller cgroup limit."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            raw = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if raw.isdigit():
            total = min(total, int(raw))
    return total


def data_limit() -> int:
    return min(MAX_DATA_BYTES, machine_memory() // 6)


def model_limit() -> int:
    return min(MAX_MODEL_BYTES, machine_memory() // 3)


def _size(n: float) -> str:
    return f"{n / GIB:.2f} GiB" if n >= GIB / 10 else f"{n / 1024**2:.1f} MiB"


def _inflation(path: Path, key: str, info: zipfile.ZipInfo) -> None:
    if info.file_size > SMALL and info.file_size > MAX_INFLATION * max(1, info.compress_size):
        raise BadInput(f"{key}: {path}: member {info.filename!r} declares {_size(info.file_size)} from "
                       f"{_size(info.compress_size)} compressed (more than {MAX_INFLATION}x): refused as a "
                       "decompression bomb; nothing was read")


def check_model_archive(path: str | Path, key: str = "victim.model.path") -> int:
    """Bytes a model file expands to when read (zip: the members' declared sizes; else its size);
    BadInput over `model_limit()` or for a member that inflates like a bomb."""
    p = Path(path)
    if not zipfile.is_zipfile(p):
        total = p.stat().st_size
    else:
        try:
            with zipfile.ZipFile(p) as zf:
                infos = zf.infolist()
        except (zipfile.BadZipFile, OSError, ValueError) as exc:
            raise BadInput(f"{key}: {p} is not a readable archive ({type(exc).__name__})") from None
        for info in infos:
            _inflation(p, key, info)
        total = sum(i.file_size for i in infos)
    limit = model_limit()
    if total > limit:
        raise BadInput(f"{key}: {p} declares {_size(total)} of data; allowed: at most {_size(limit)} "
                       f"(min of {_size(MAX_MODEL_BYTES)} and a third of this machine's memory)")
    return total


@dataclass(frozen=True)
class NpyEntry:
    """What one .npy member of an .npz declares, read from its header only."""

    name: str
    shape: tuple[int, ...]
    dtype: object  # numpy dtype

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


def npz_manifest(path: str | Path, key: str = "victim.data.path") -> dict[str, NpyEntry]:
    """The arrays an .npz declares (name → shape, dtype), from the zip directory and the .npy
    headers only; BadInput for an unreadable archive, a header that cannot be read, object or
    structured dtypes, a member that holds less than it declares or inflates like a bomb, and
    arrays over `data_limit()` in total (as float64)."""
    import numpy as np
    from numpy.lib import format as npf

    p = Path(path)
    out: dict[str, NpyEntry] = {}
    try:
        zf = zipfile.ZipFile(p)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise BadInput(f"{key}: {p} is not a readable .npz ({type(exc).__name__})") from None
    with zf:
        for info in zf.infolist():
            if not info.filename.endswith(".npy"):
                continue
            name = info.filename[:-4]
            _inflation(p, key, info)
            try:
                with zf.open(info) as fh:
                    version = npf.read_magic(fh)
                    reader = {(1, 0): npf.read_array_header_1_0,
                              (2, 0): npf.read_array_header_2_0}.get(version)
                    if reader is None:
                        raise ValueError(f"npy format version {version}")
                    shape, _, dtype = reader(fh)
                    header = fh.tell()
            except (ValueError, OSError, EOFError, zipfile.BadZipFile, SyntaxError) as exc:
                raise BadInput(f"{key}: {p}: array {name!r} has no readable .npy header "
                               f"({type(exc).__name__})") from None
            if dtype.hasobject or dtype.names is not None or dtype.subdtype is not None:
                raise BadInput(f"{key}: {p}: array {name!r} has dtype {dtype}; allowed: plain numbers "
                               "(no objects, no structured records)")
            entry = NpyEntry(name, tuple(int(s) for s in shape), dtype)
            if entry.size * dtype.itemsize > info.file_size - header:
                raise BadInput(f"{key}: {p}: array {name!r} declares shape {list(entry.shape)} "
                               f"({_size(entry.size * dtype.itemsize)}) but its member holds "
                               f"{_size(max(0, info.file_size - header))}: a corrupt or crafted file")
            out[name] = entry
    total = sum(e.size for e in out.values()) * np.dtype(np.float64).itemsize
    limit = data_limit()
    if total > limit:
        biggest = max(out.values(), key=lambda e: e.size)
        raise BadInput(f"{key}: {p} declares {_size(total)} of arrays as float64 (largest: "
                       f"{biggest.name!r} of shape {list(biggest.shape)}); allowed: at most {_size(limit)} "
                       f"(min of {_size(MAX_DATA_BYTES)} and a sixth of this machine's memory); nothing "
                       "was read")
    return out

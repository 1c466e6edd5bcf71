"""Decompression bombs for the file-limit tests and benchmarks/safety_table.py: zip archives whose
members declare gigabytes but take a few MB on disk (deflated zeros), written by hand so that
making a 3 GB bomb costs one 16 MB compression, not three gigabytes of it."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np

BLOCK = 16 * 1024 * 1024


def _deflated_zeros(prefix: bytes, n_zeros: int) -> bytes:
    """Raw deflate of `prefix` followed by n_zeros zero bytes (blocks compressed once, repeated:
    with a full flush each block starts from a reset state, so equal blocks give equal bytes)."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = c.compress(prefix) + c.flush(zlib.Z_FULL_FLUSH)
    whole, rest = divmod(n_zeros, BLOCK)
    block = c.compress(bytes(BLOCK)) + c.flush(zlib.Z_FULL_FLUSH) if whole else b""
    tail = c.compress(bytes(rest)) + c.flush(zlib.Z_FINISH)
    return head + block * whole + tail


def write_zip(path: Path, members: list[tuple[str, bytes, int, int, int]]) -> Path:
    """A zip of (name, data, method, declared size, crc) members (sizes < 4 GiB, no zip64)."""
    out = io.BytesIO()
    central = b""
    for name, data, method, size, crc in members:
        offset = out.tell()
        raw = name.encode()
        out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x21, crc, len(data), size,
                              len(raw), 0) + raw + data)
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0x21, crc, len(data),
                               size, len(raw), 0, 0, 0, 0, 0, offset) + raw
    start = out.tell()
    out.write(central)
    n = len(members)
    out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, n, n, len(central), start, 0))
    path.write_bytes(out.getvalue())
    return path


def _stored(name: str, data: bytes) -> tuple[str, bytes, int, int, int]:
    return name, data, zipfile.ZIP_STORED, len(data), zlib.crc32(data)


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, a)
    return buf.getvalue()


def npz_bomb(path: Path, shape: tuple[int, int] = (400_000, 1000)) -> Path:
    """An .npz whose x_train declares `shape` float64 zeros (3.2 GB by default) in a few MB; the
    other arrays are real and small (y_train matches x_train's rows)."""
    buf = io.BytesIO()
    header_of = np.lib.format.header_data_from_array_1_0(np.zeros((1, 1)))
    header_of["shape"] = shape
    np.lib.format.write_array_header_1_0(buf, header_of)
    prefix = buf.getvalue()
    n = shape[0] * shape[1] * 8
    data = _deflated_zeros(prefix, n)
    members = [("x_train.npy", data, zipfile.ZIP_DEFLATED, len(prefix) + n, 0),  # crc never checked here
               _stored("y_train.npy", _npy(np.zeros(shape[0], dtype=np.int64))),
               _stored("x_test.npy", _npy(np.zeros((4, shape[1])))),
               _stored("y_test.npy", _npy(np.array([0, 1, 0, 1])))]
    return write_zip(path, members)


def pt_bomb(path: Path, numel: int = 150_000_000) -> Path:
    """A torch.save-style state_dict zip {"w": zeros(numel)} (float32) whose tensor data is
    deflated: 600 MB declared in about 0.6 MB by default."""
    import torch

    marker = 70_001  # a size written as a 4-byte int in the pickle, replaced by numel
    buf = io.BytesIO()
    torch.save({"w": torch.zeros(marker)}, buf)
    members = []
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as zf:
        for info in zf.infolist():
            data = zf.read(info)
            if info.filename.endswith("data.pkl"):
                data = data.replace(b"J" + struct.pack("<i", marker), b"J" + struct.pack("<i", numel))
                members.append(_stored(info.filename, data))
            elif info.filename.endswith("/data/0"):
                members.append((info.filename, _deflated_zeros(b"", numel * 4), zipfile.ZIP_DEFLATED,
                                numel * 4, 0))
            else:
                members.append(_stored(info.filename, data))
    return write_zip(path, members)

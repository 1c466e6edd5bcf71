"""Writing output files a user names (--json, --sarif, --junit, the report files) without
harming what is already there.

A file is written to a temporary file in its own folder and renamed over the target, so a reader
never sees half a file. The target must be a regular file or absent: a device (/dev/full), a pipe
or a folder is refused, never replaced by a plain file. A symlink is followed only to a file in
the same folder; one that leads out of it is refused (a planted link must not redirect a write).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path


class OutputRefused(Exception):
    """The output path cannot be written safely; the message says why."""


def output_target(path: str | Path) -> Path:
    """The file a write to `path` will replace (the symlink's target when it stays in the folder);
    OutputRefused for a missing folder, a link out of the folder, or a target that is not a
    regular file."""
    p = Path(path)
    folder = p.parent.resolve()
    if not folder.is_dir():
        raise OutputRefused(f"folder {folder} does not exist")
    target = folder / p.name
    if target.is_symlink():
        resolved = target.resolve()
        if resolved.parent != folder:
            raise OutputRefused(f"{p} is a symlink to {resolved}, outside its folder; leakmeter follows no "
                                "link out of the folder it writes in")
        target = resolved
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return target
    if not stat.S_ISREG(mode):
        kind = ("a folder" if stat.S_ISDIR(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a pipe" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a file")
        raise OutputRefused(f"{p} is {kind}, not a regular file; leakmeter replaces regular files only")
    return target


def check_writable(path: str | Path) -> Path:
    """`output_target(path)`, after proving its folder takes a new file (a real try: permission
    bits say nothing to root, nor about read-only mounts or /proc). OutputRefused otherwise."""
    target = output_target(path)
    try:
        fd, probe = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".probe")
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise OutputRefused(f"cannot write in {target.parent} ({why})") from None
    os.close(fd)
    os.unlink(probe)
    return target


def check_folder(path: str | Path) -> Path:
    """A folder leakmeter will create (or fill): it, or its nearest existing parent, must be a
    folder that takes a new file. OutputRefused otherwise."""
    p = Path(path).absolute()
    probe = p
    while not probe.exists() and not probe.is_symlink():
        probe = probe.parent
    if not probe.is_dir():
        raise OutputRefused(f"{probe} is not a folder")
    try:
        fd, name = tempfile.mkstemp(dir=probe, prefix=".leakmeter-", suffix=".probe")
    except OSError as exc:
        raise OutputRefused(f"cannot write in {probe} ({exc.strerror or type(exc).__name__})") from None
    os.close(fd)
    os.unlink(name)
    return p


def write_output(path: str | Path, data: str | bytes) -> Path:
    """Write `data` to `path` as described above; returns the file written."""
    target = output_target(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
        try:
            os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))  # keep an existing file's mode
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        output_target(target)  # still a regular file (or absent) right before the rename
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target

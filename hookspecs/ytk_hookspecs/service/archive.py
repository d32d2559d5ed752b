"""Job archives: written deterministically by a client, unpacked without trust by a worker.

:func:`write_archive` makes a gzip'd tar whose bytes depend only on its members (a fixed order,
mtime 0, mode 0644, gzip without a timestamp), so the same inputs give the same sha256 and a
resumed submit under the same idempotency key carries the same bytes.

:func:`safe_extract` checks every member from its header before a byte of it is written: a regular
file or a folder only (no symlink, hardlink, device or fifo), a plain relative path (no absolute
path, no ``..``, no backslash), under the job's fixed top-level names, at most ``max_members``
members and ``max_bytes`` bytes in all. Files are written by this code with ``O_EXCL | O_NOFOLLOW``
into a fresh folder, never by ``tarfile.extract``.
"""

from __future__ import annotations

import gzip
import io
import os
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

__all__ = ["MAX_DEPTH", "MAX_NAME", "ArchiveRefused", "ExtractLimits", "write_archive", "safe_extract"]


MAX_DEPTH = 8
MAX_NAME = 255


class ArchiveRefused(Exception):
    """The archive breaks a rule; the message names the member and the rule."""


@dataclass(frozen=True)
class ExtractLimits:
    """How much an uploaded archive may unpack to: members and bytes."""
    max_members: int
    max_bytes: int


def write_archive(dest: Path, members: Iterable[tuple[str, bytes | Path]]) -> Path:
    """Write ``members`` (archive name, bytes or a file to copy) to ``dest`` in the given order; a name
    given twice is written once (the first)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    with open(dest, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", compresslevel=1, mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in members:
            if name in seen:
                continue
            seen.add(name)
            info = tarfile.TarInfo(name)
            info.mtime, info.mode = 0, 0o644
            if isinstance(data, bytes):
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
            else:
                info.size = data.stat().st_size
                with open(data, "rb") as f:
                    tf.addfile(info, f)
    return dest


def safe_extract(archive: Path, dest: Path, limits: ExtractLimits, top_level: tuple[str, ...]) -> list[str]:
    """Unpack ``archive`` (a gzip'd tar) into ``dest`` (created, must not exist); returns the files written.

    Every member must lie under one of ``top_level`` (a job's fixed root names)."""
    dest.mkdir(parents=True)
    written: list[str] = []
    seen: set[str] = set()
    total = 0
    try:
        with tarfile.open(archive, "r:gz") as tf:
            for count, m in enumerate(tf, start=1):
                if count > limits.max_members:
                    raise ArchiveRefused(f"more than {limits.max_members} members")
                name = _check_name(m.name, top_level)
                if m.issym() or m.islnk():
                    raise ArchiveRefused(f"member {m.name!r} is a {'symlink' if m.issym() else 'hardlink'} "
                                         f"(to {m.linkname!r}); links are not allowed")
                if m.isdir():
                    (dest / name).mkdir(parents=True, exist_ok=True)
                    continue
                if not m.isreg():
                    raise ArchiveRefused(f"member {m.name!r} is not a regular file (a device, fifo or other special "
                                         "file)")
                if name in seen:
                    raise ArchiveRefused(f"member {m.name!r} appears twice")
                seen.add(name)
                total += m.size
                if total > limits.max_bytes:
                    raise ArchiveRefused(f"its files add up to more than {limits.max_bytes} bytes unpacked "
                                         "(the worker's --max-extract-mb)")
                _write(tf, m, dest / name)
                written.append(name)
    except (tarfile.TarError, EOFError, OSError, ValueError) as e:
        if isinstance(e, OSError) and e.errno is not None and e.filename:
            raise ArchiveRefused(f"cannot write {e.filename}: {e.strerror}") from None
        raise ArchiveRefused(f"not a readable gzip'd tar ({type(e).__name__}: {' '.join(str(e).split())[:200]})"
                             ) from None
    return written


def _check_name(raw: str, top_level: tuple[str, ...]) -> str:
    if not raw or "\\" in raw or "\x00" in raw or raw.startswith("/"):
        raise ArchiveRefused(f"member {raw!r} has an absolute or malformed path")
    p = PurePosixPath(raw)
    if p.is_absolute() or ".." in p.parts:
        raise ArchiveRefused(f"member {raw!r} escapes the job folder ('..' or an absolute path)")
    parts = [x for x in p.parts if x != "."]
    if not parts:
        raise ArchiveRefused(f"member {raw!r} has an empty path")
    if parts[0] not in top_level:
        raise ArchiveRefused(f"member {raw!r} is not part of a job (a job holds {', '.join(top_level)})")
    if len(parts) > MAX_DEPTH or any(len(x) > MAX_NAME for x in parts):
        raise ArchiveRefused(f"member {raw[:80]!r}... is nested too deep or named too long")
    return "/".join(parts)


def _write(tf: tarfile.TarFile, m: tarfile.TarInfo, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    src = tf.extractfile(m)
    if src is None:
        raise ArchiveRefused(f"member {m.name!r} has no data")
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    left = m.size
    with os.fdopen(fd, "wb") as out:
        while left > 0:
            chunk = src.read(min(left, 1 << 20))
            if not chunk:
                raise ArchiveRefused(f"member {m.name!r} is truncated")
            out.write(chunk)
            left -= len(chunk)

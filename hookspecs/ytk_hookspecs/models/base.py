"""Base class for every versioned artifact and hook payload.

Every model that crosses a hook boundary or lands on disk carries ``schema_version``. A file
written by a newer ytk is refused with a message that says so, instead of a pile of field errors.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

__all__ = ["ArtifactError", "Versioned", "problem", "write_text_atomic", "file_mode", "replace_file",
           "write_bytes_atomic", "sha256_file"]


T = TypeVar("T", bound="Versioned")


class ArtifactError(Exception):
    """A file on disk is missing, corrupt, or from an incompatible version."""


class Versioned(BaseModel):
    """A pydantic model with a schema version; unknown fields are rejected."""

    model_config = ConfigDict(extra="forbid", validate_assignment=False)

    SCHEMA_VERSION: ClassVar[int] = 1
    schema_version: int = 1

    def __init__(self, **data: Any) -> None:
        data.setdefault("schema_version", type(self).SCHEMA_VERSION)
        super().__init__(**data)

    @field_validator("schema_version")
    @classmethod
    def _not_newer(cls, v: int) -> int:
        if v > cls.SCHEMA_VERSION:
            raise ValueError(
                f"{cls.__name__} schema_version {v} was written by a newer ytk "
                f"(this one reads up to {cls.SCHEMA_VERSION}); upgrade yasp-toolkit"
            )
        return v

    # -- disk helpers -------------------------------------------------------------------------
    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write as indented JSON atomically (temp file + rename): a crash never leaves half a file."""
        p = Path(path)
        write_text_atomic(p, self.model_dump_json(indent=2) + "\n")
        return p

    @classmethod
    def read(cls: type[T], path: str | os.PathLike[str]) -> T:
        """Read and validate; any problem is an :class:`ArtifactError` naming the file."""
        p = Path(path)
        try:
            raw = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ArtifactError(f"{p}: file not found (expected a {cls.__name__} JSON file)") from None
        except IsADirectoryError:
            raise ArtifactError(f"{p}: is a directory, not a {cls.__name__} JSON file") from None
        except OSError as e:
            raise ArtifactError(f"{p}: cannot read: {e.strerror}") from None
        except UnicodeDecodeError as e:
            raise ArtifactError(f"{p}: not a valid {cls.__name__}: not UTF-8 text (a bad byte at offset "
                                f"{e.start}); the file is corrupt") from None
        try:
            return cls.model_validate_json(raw)
        except ValidationError as e:
            # another kind of file (a prepare.json given for an fx_nodes.json) lacks this one's fields: say so,
            # rather than that its schema_version was written by a newer ytk
            missing = [str(x["loc"][0]) for x in e.errors() if x["type"] == "missing" and len(x["loc"]) == 1]
            if missing:
                # its schema_version is another kind's numbering: comparing it with this kind's says nothing
                raise ArtifactError(f"{p}: not a {cls.__name__} file (it has no {', '.join(missing[:3])}"
                                    f"{' ...' if len(missing) > 3 else ''}): another kind of file than this "
                                    "option takes") from None
            raise ArtifactError(f"{p}: not a valid {cls.__name__} ({problem(e)})") from None


def problem(e: Exception) -> str:
    """One line about why a document did not validate: pydantic's count and first problem (its message
    runs over several lines), else the exception's first line."""
    if isinstance(e, ValidationError):
        first = e.errors()[0]
        loc = ".".join(str(x) for x in first.get("loc", ())) or "<root>"
        return f"{e.error_count()} problem(s); first at {loc}: {first.get('msg')}"
    lines = str(e).strip().splitlines()
    return (lines[0] if lines else type(e).__name__)[:400]


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically, as :func:`write_bytes_atomic` does."""
    write_bytes_atomic(path, text.encode())


_UMASK: int | None = None


def file_mode(executable: bool = False) -> int:
    """The mode ``open()`` (or a linker, for ``executable``) would give a new file under the process's
    umask. Temp files from ``mkstemp`` are 0600: outputs renamed into place from one get this mode."""
    global _UMASK
    if _UMASK is None:
        _UMASK = os.umask(0o022)  # reading the umask means setting it: put it straight back
        os.umask(_UMASK)
    return (0o777 if executable else 0o666) & ~_UMASK


def replace_file(tmp: str | Path, path: Path) -> None:
    """Rename the finished ``tmp`` onto ``path``, unless ``path`` is something other than a regular file
    (a device, FIFO or socket, which the rename would replace: as root, ``/dev/null``)."""
    if os.path.exists(path) and not os.path.isfile(path):
        raise ArtifactError(f"{path} exists and is not a regular file (a device, FIFO or socket): not replaced; "
                            "write to a file path")
    os.replace(tmp, path)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file in the same directory and an atomic rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, file_mode())  # mkstemp makes 0600; a user's outputs get the mode open() gives
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        replace_file(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a file's bytes, hex, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


"""The wire basics every ytk job service and its client share.

A service's own request and record models live with it; these are the parts that must not differ
between two services: the header names, the refusal body, a slice of a job's log and the health
answer.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import ClassVar, Literal

from pydantic import Field

from ..models import Versioned

API = "/v1"
AUTH_HEADER = "Authorization"
IDEMPOTENCY_HEADER = "Idempotency-Key"
#: sha256 of the uploaded archive (a retried submit with the same key must carry the same bytes)
ARCHIVE_SHA_HEADER = "X-Ytk-Archive-Sha256"
#: what an idempotency key may be
IDEMPOTENCY_KEY = re.compile(r"^[A-Za-z0-9_.:-]{8,128}$")
IDEMPOTENCY_KEY_RULE = "8-128 characters of letters, digits, '_', '.', ':' or '-'"
#: a job id: a uuid4 as 32 hex digits
JOB_ID = re.compile(r"^[0-9a-f]{32}$")
#: the most log text one poll returns
MAX_LOG_CHUNK = 1 << 20


def utcnow() -> str:
    """Now, UTC, ISO 8601 to the second (job records and log lines)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class ErrorBody(Versioned):
    """Every refusal: one line for the user and the exit status the client should end with."""

    error: str
    exit_code: int = 2


class LogChunk(Versioned):
    """Part of a job's log: the text from byte ``offset`` on; ask again from ``next_offset``."""

    offset: int
    next_offset: int
    text: str


class Health(Versioned):
    """Liveness, with no token needed; ``service`` names what answers ("kronos worker", "gaia service"), so a
    client pointed at the wrong kind of service says so instead of "refused the token"."""

    SCHEMA_VERSION: ClassVar[int] = 2
    schema_version: int = 2
    status: Literal["ok"] = "ok"
    service: str | None = None


def read_log_chunk(path: "object", offset: int) -> LogChunk:
    """The log at ``path`` from byte ``offset`` (at most :data:`MAX_LOG_CHUNK`), cut at a line end."""
    from pathlib import Path

    p = Path(str(path))
    if not p.is_file():
        return LogChunk(offset=offset, next_offset=offset, text="")
    with open(p, "rb") as f:
        f.seek(offset)
        data = f.read(MAX_LOG_CHUNK)
    if len(data) == MAX_LOG_CHUNK and b"\n" in data:
        data = data[: data.rindex(b"\n") + 1]  # never split a line (or a UTF-8 character) across two polls
    return LogChunk(offset=offset, next_offset=offset + len(data), text=data.decode(errors="replace"))


__all__ = ["API", "ARCHIVE_SHA_HEADER", "AUTH_HEADER", "ErrorBody", "Field", "Health", "IDEMPOTENCY_HEADER",
           "IDEMPOTENCY_KEY", "JOB_ID", "LogChunk", "MAX_LOG_CHUNK", "read_log_chunk", "utcnow"]

"""The Kronos worker's HTTP client: the shared retrying client (:mod:`ytk_hookspecs.service.http`)
speaking the Kronos API, its failures as the core's errors.

Transport errors (a refused or dropped connection, a timeout), 429 and every 5xx are retried with
exponential backoff, waiting what the worker's ``Retry-After`` asks where it says, until the retry
budget (``YTK_KRONOS_RETRY_S``, default 120 s) is spent. Anything else is the worker's answer: one
:class:`~ytk_core.errors.YtkError` line with the exit status the worker named. A submit carries an
idempotency key, so a retried submit never runs a job twice.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx

from ytk_hookspecs.models import sha256_file
from ytk_hookspecs.service.http import Failure, RetryingClient

from ..errors import BackendError, UsageError, YtkError
from .protocol import (API, ARCHIVE_SHA_HEADER, BUNDLE_SHA_HEADER, IDEMPOTENCY_HEADER, JobRecord, LogChunk,
                       SubmitResponse, WorkerInfo)

TOKEN_ENV = "YTK_KRONOS_TOKEN"
RETRY_ENV = "YTK_KRONOS_RETRY_S"
DEFAULT_RETRY_S = 120.0


class WorkerUnreachable(BackendError):
    """The worker could not be reached (or kept answering 429/5xx) for the whole retry budget."""


class KronosClient(RetryingClient):
    """One worker at ``url``; ``token`` goes in the Authorization header and nowhere else."""

    service = "kronos worker"
    retry_hint = RETRY_ENV
    token_hint = f"set {TOKEN_ENV}, or [workers] kronos_token in ytk.toml, to the worker's token"

    def __init__(self, url: str, token: str | None, retry_s: float | None = None, timeout_s: float = 60.0) -> None:
        super().__init__(url, token, retry_s if retry_s is not None else _env_float(RETRY_ENV, DEFAULT_RETRY_S),
                         timeout_s, url_flag="--worker")

    def error(self, kind: Failure, message: str, exit_code: int, status: int = 0) -> Exception:
        if kind == "usage":
            return UsageError(message)
        if kind in ("unreachable", "busy"):
            return WorkerUnreachable(message)
        if kind == "token":
            return UsageError(message)
        if kind == "refused":
            return YtkError(message, exit_code=exit_code)
        return BackendError(message)

    # -- the API ------------------------------------------------------------------------------------
    def info(self) -> WorkerInfo:
        return self.model(WorkerInfo, self.call("GET", f"{API}/info"))

    def submit(self, archive: Path, key: str) -> SubmitResponse:
        """Upload ``archive`` as a job under idempotency ``key`` (each try re-reads the file)."""
        digest = sha256_file(archive)
        headers = {IDEMPOTENCY_HEADER: key, ARCHIVE_SHA_HEADER: digest, "Content-Type": "application/gzip"}

        def send() -> httpx.Response:
            with open(archive, "rb") as f:  # httpx streams a file in chunks, its Content-Length from its size
                return self._http.post(f"{API}/jobs", content=f, headers=headers)

        return self.model(SubmitResponse, self.call("POST", f"{API}/jobs", send=send))

    def job(self, job_id: str) -> JobRecord:
        return self.model(JobRecord, self.call("GET", f"{API}/jobs/{job_id}"))

    def log(self, job_id: str, offset: int = 0) -> LogChunk:
        return self.model(LogChunk, self.call("GET", f"{API}/jobs/{job_id}/log", params={"offset": offset}))

    def download_bundle(self, job_id: str, dest: Path) -> str:
        """Stream the job's bundle to ``dest``; returns its sha256, checked against what the worker says."""
        return self.download(f"{API}/jobs/{job_id}/bundle", dest, BUNDLE_SHA_HEADER, f"the bundle of job {job_id}")


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    if not raw:
        return default
    try:
        return max(0.0, float(raw))
    except ValueError:
        raise UsageError(f"{name}={raw!r}: expected a number of seconds") from None

"""The Kronos worker's HTTP client: httpx, with tenacity retrying what a retry can fix.

Transport errors (a refused or dropped connection, a timeout), 429 and every 5xx are retried with
exponential backoff, waiting what the worker's ``Retry-After`` asks where it says, until the retry
budget (``YTK_KRONOS_RETRY_S``, default 120 s) is spent. Anything else is the worker's answer: one
:class:`~ytk_core.errors.YtkError` line with the exit status the worker named. A submit carries an
idempotency key, so a retried submit never runs a job twice.
"""

from __future__ import annotations

import email.utils
import hashlib
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
from pydantic import ValidationError
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_delay

from ytk_hookspecs.models import Versioned

from ..errors import BackendError, UsageError, YtkError
from .protocol import (API, ARCHIVE_SHA_HEADER, AUTH_HEADER, BUNDLE_SHA_HEADER, IDEMPOTENCY_HEADER, ErrorBody,
                       JobRecord, LogChunk, SubmitResponse, WorkerInfo)

T = TypeVar("T", bound=Versioned)

TOKEN_ENV = "YTK_KRONOS_TOKEN"
RETRY_ENV = "YTK_KRONOS_RETRY_S"
DEFAULT_RETRY_S = 120.0
#: the longest single wait between two tries, whatever Retry-After asks
MAX_WAIT_S = 30.0


class _Retryable(Exception):
    """A 429 or 5xx answer: worth another try (after ``retry_after`` seconds when the worker said)."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.response = response
        self.retry_after = _retry_after(response.headers.get("Retry-After"))


class WorkerUnreachable(BackendError):
    """The worker could not be reached (or kept answering 429/5xx) for the whole retry budget."""


def _retry_after(value: str | None) -> float | None:
    """Retry-After as seconds: a number, or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, (httpx.TransportError, _Retryable))


class KronosClient:
    """One worker at ``url``; ``token`` goes in the Authorization header and nowhere else."""

    def __init__(self, url: str, token: str | None, retry_s: float | None = None, timeout_s: float = 60.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"--worker {url!r}: expected an http:// or https:// URL, e.g. http://orin:8470")
        self.url = url.rstrip("/")
        self.retry_s = retry_s if retry_s is not None else _env_float(RETRY_ENV, DEFAULT_RETRY_S)
        headers = {AUTH_HEADER: f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers,
                                  timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)))
        self._on_retry: Callable[[str], None] | None = None

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "KronosClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- the API ------------------------------------------------------------------------------------
    def info(self) -> WorkerInfo:
        return self._model(WorkerInfo, self._call("GET", f"{API}/info"))

    def submit(self, archive: Path, key: str) -> SubmitResponse:
        """Upload ``archive`` as a job under idempotency ``key`` (each try re-reads the file)."""
        digest = _sha256(archive)
        headers = {IDEMPOTENCY_HEADER: key, ARCHIVE_SHA_HEADER: digest, "Content-Type": "application/gzip"}

        def send() -> httpx.Response:
            with open(archive, "rb") as f:  # httpx streams a file in chunks, its Content-Length from its size
                return self._http.post(f"{API}/jobs", content=f, headers=headers)

        return self._model(SubmitResponse, self._call("POST", f"{API}/jobs", send=send))

    def job(self, job_id: str) -> JobRecord:
        return self._model(JobRecord, self._call("GET", f"{API}/jobs/{job_id}"))

    def log(self, job_id: str, offset: int = 0) -> LogChunk:
        return self._model(LogChunk, self._call("GET", f"{API}/jobs/{job_id}/log", params={"offset": offset}))

    def download_bundle(self, job_id: str, dest: Path) -> str:
        """Stream the job's bundle to ``dest``; returns its sha256, checked against what the worker says."""

        def fetch() -> httpx.Response:
            h = hashlib.sha256()
            with self._http.stream("GET", f"{API}/jobs/{job_id}/bundle") as r:
                if r.status_code != 200:
                    r.read()
                    return r
                with open(dest, "wb") as f:
                    for chunk in r.iter_bytes(1 << 20):
                        h.update(chunk)
                        f.write(chunk)
            r.extensions["ytk_sha256"] = h.hexdigest()
            return r

        r = self._call("GET", f"{API}/jobs/{job_id}/bundle", send=fetch)
        got, said = r.extensions["ytk_sha256"], r.headers.get(BUNDLE_SHA_HEADER, "")
        if said and said != got:
            raise BackendError(f"the bundle of job {job_id} from the kronos worker at {self.url} arrived damaged "
                               f"(sha256 {got[:12]}..., the worker sent {said[:12]}...); run the command again")
        return got

    # -- plumbing -----------------------------------------------------------------------------------
    def on_retry(self, callback: Callable[[str], None] | None) -> None:
        """``callback(message)`` on every retry (the progress display shows it)."""
        self._on_retry = callback

    def _call(self, method: str, path: str, send: Callable[[], httpx.Response] | None = None,
              **kw: Any) -> httpx.Response:
        def once() -> httpx.Response:
            r = send() if send is not None else self._http.request(method, path, **kw)
            if r.status_code == 429 or r.status_code >= 500:
                raise _Retryable(r)
            return r

        retrying = Retrying(retry=retry_if_exception(_retryable), stop=stop_after_delay(self.retry_s),
                            wait=self._wait, before_sleep=self._say_retry, reraise=True)
        try:
            r = retrying(once)
        except httpx.TransportError as e:
            raise WorkerUnreachable(f"the kronos worker at {self.url} cannot be reached ({_transport(e)}; retried "
                                    f"for {self.retry_s:g} s, {RETRY_ENV} sets how long)") from None
        except _Retryable as e:
            raise WorkerUnreachable(f"the kronos worker at {self.url} kept answering {method} {path} with "
                                    f"{_status_line(e.response)} for {self.retry_s:g} s ({RETRY_ENV} sets how "
                                    "long); try again later") from None
        if r.status_code >= 400:
            raise self._refusal(method, path, r)
        return r

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        backoff = min(10.0, 0.5 * 2 ** (state.attempt_number - 1)) + random.uniform(0, 0.25)
        if isinstance(exc, _Retryable) and exc.retry_after is not None:
            backoff = exc.retry_after
        left = self.retry_s - (state.seconds_since_start or 0.0)
        return max(0.0, min(backoff, MAX_WAIT_S, left))

    def _say_retry(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        what = _status_line(exc.response) if isinstance(exc, _Retryable) else _transport(exc)
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        if self._on_retry is not None:
            self._on_retry(f"kronos worker: {what}; retrying in {wait:.1f} s")

    def _refusal(self, method: str, path: str, r: httpx.Response) -> YtkError:
        """A 4xx answer as one error line: the worker's own words and exit status where it gave them."""
        try:
            body = ErrorBody.model_validate_json(r.content)
            msg, code = body.error, body.exit_code
        except (ValidationError, ValueError):
            msg, code = _status_line(r), 2 if r.status_code < 500 else 3
        if r.status_code in (401, 403):
            return UsageError(f"the kronos worker at {self.url} refused the token: {msg} (set {TOKEN_ENV}, or "
                              "[workers] kronos_token in ytk.toml, to the worker's token)")
        return YtkError(f"the kronos worker at {self.url} refused {method} {path}: {msg}", exit_code=code)

    def _model(self, cls: type[T], r: httpx.Response) -> T:
        try:
            return cls.model_validate_json(r.content)
        except ValidationError as e:
            first = e.errors()[0]
            raise BackendError(f"the kronos worker at {self.url} answered with an invalid {cls.__name__} "
                               f"({first.get('msg')}); is it a kronos worker of a compatible ytk?") from None


def _sha256(path: Path) -> str:
    from ytk_hookspecs.models import sha256_file

    return sha256_file(path)


def _transport(exc: BaseException | None) -> str:
    if exc is None:
        return "no answer"
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:200]


def _status_line(r: httpx.Response) -> str:
    return f"HTTP {r.status_code} {r.reason_phrase}".strip()


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    if not raw:
        return default
    try:
        return max(0.0, float(raw))
    except ValueError:
        raise UsageError(f"{name}={raw!r}: expected a number of seconds") from None

"""The client side every ytk job service shares: httpx, with tenacity retrying what a retry can fix.

Transport errors (a refused or dropped connection, a timeout), 429 and every 5xx are retried with
exponential backoff, waiting what the service's ``Retry-After`` asks where it says, until the retry
budget is spent. Anything else is the service's answer: one error line with the exit status the
service named. A subclass names its service (``service``: "kronos worker", "gaia service") and may
turn each kind of failure into its own error type (:meth:`RetryingClient.error`).
"""

from __future__ import annotations

import email.utils
import hashlib
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

import httpx
from pydantic import ValidationError
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_delay

from ..errors import StageError
from ..models import Versioned
from .protocol import API, AUTH_HEADER, ErrorBody

__all__ = ["MAX_WAIT_S", "Failure", "CONFIG_FAILURES", "ServiceError", "retry_after", "RetryingClient",
           "status_line", "follow_job", "local_paths_out"]


T = TypeVar("T", bound=Versioned)
#: the longest single wait between two tries, whatever Retry-After asks
MAX_WAIT_S = 30.0
Failure = Literal["usage", "unreachable", "busy", "token", "refused", "invalid", "damaged"]
#: failures of the settings (the URL, the token, the kind of service there): no retry or later try mends them
CONFIG_FAILURES: tuple[Failure, ...] = ("usage", "token", "invalid")


class ServiceError(StageError):
    """A service could not be used; ``kind`` says how (:data:`Failure`)."""

    def __init__(self, message: str, kind: Failure, exit_code: int = 3, status: int = 0) -> None:
        super().__init__(message)
        self.kind = kind
        self.exit_code = exit_code
        self.status = status  # the HTTP status of a refusal

    @property
    def stops_the_loop(self) -> bool:
        """The service cannot be used at all (unreachable, busy for the whole retry budget, the token refused, the
        URL another kind of service or none that answers as this one): every job would fail the same way, so a loop
        (the autoloop) stops on it rather than dropping each region in turn. A refusal of one job does not."""
        return self.kind in (*CONFIG_FAILURES, "unreachable", "busy")


class _Retryable(Exception):
    """A 429 or 5xx answer: worth another try (after ``retry_after`` seconds when the service said)."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.response = response
        self.retry_after = retry_after(response.headers.get("Retry-After"))


def retry_after(value: str | None) -> float | None:
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


class RetryingClient:
    """One service at ``url``; ``token`` goes in the Authorization header and nowhere else.

    ``retry_hint`` says how to change the retry budget (e.g. the environment variable), ``token_hint``
    how to set the token; both end up in the error lines, as ``url_flag`` (where the URL came from) does."""

    service = "service"
    retry_hint = ""
    token_hint = ""

    def __init__(self, url: str, token: str | None, retry_s: float, timeout_s: float = 60.0,
                 url_flag: str = "the URL") -> None:
        if not url.startswith(("http://", "https://")):
            raise self.error("usage", f"{url_flag} {url!r}: expected an http:// or https:// URL, e.g. "
                                      "http://host:8470", 2)
        self.url = url.rstrip("/")
        self.url_flag = url_flag
        self.retry_s = retry_s
        headers = {AUTH_HEADER: f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers,
                                  timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)))
        self._on_retry: Callable[[str], None] | None = None

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "RetryingClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- what a subclass may change ------------------------------------------------------------------
    def error(self, kind: Failure, message: str, exit_code: int, status: int = 0) -> Exception:
        """The exception raised for a failure of ``kind`` (``status``: a refusal's HTTP status); override to raise
        your own types."""
        return ServiceError(message, kind, exit_code, status)

    def on_retry(self, callback: Callable[[str], None] | None) -> None:
        """``callback(message)`` on every retry (a progress display shows it)."""
        self._on_retry = callback

    # -- calls ---------------------------------------------------------------------------------------
    def call(self, method: str, path: str, send: Callable[[], httpx.Response] | None = None,
             **kw: Any) -> httpx.Response:
        """One request, retried while a retry can help; a 4xx is one error line."""
        def once() -> httpx.Response:
            r = send() if send is not None else self._http.request(method, path, **kw)
            if r.status_code == 429 or r.status_code >= 500:
                raise _Retryable(r)
            return r

        retrying = Retrying(retry=retry_if_exception(_retryable), stop=stop_after_delay(self.retry_s),
                            wait=self._wait, before_sleep=self._say_retry, reraise=True)
        budget = f"{self.retry_s:g} s" + (f", {self.retry_hint} sets how long" if self.retry_hint else "")
        try:
            r = retrying(once)
        except httpx.TransportError as e:
            raise self.error("unreachable", f"the {self.service} at {self.url} cannot be reached ({_transport(e)}; "
                                            f"retried for {budget})", 3) from None
        except _Retryable as e:
            raise self.error("busy", f"the {self.service} at {self.url} kept answering {method} {path} with "
                                     f"{status_line(e.response)} for {budget}; try again later", 3) from None
        if r.status_code >= 400:
            raise self._refusal(method, path, r)
        return r

    def model(self, cls: type[T], r: httpx.Response) -> T:
        """The answer as ``cls``; anything else means the peer is not the service this client speaks to."""
        try:
            return cls.model_validate_json(r.content)
        except ValidationError as e:
            wrong = self._wrong_service(r.status_code)
            if wrong is not None:
                raise wrong from None
            first = e.errors()[0]
            raise self.error("invalid", f"the {self.service} at {self.url} answered with an invalid {cls.__name__} "
                                        f"({first.get('msg')}); is it a {self.service} of a compatible ytk?",
                             3) from None

    def download(self, path: str, dest: Path, sha_header: str, what: str) -> str:
        """Stream ``GET path`` to ``dest``; returns its sha256, checked against the ``sha_header`` sent."""

        def fetch() -> httpx.Response:
            h = hashlib.sha256()
            with self._http.stream("GET", path) as r:
                if r.status_code != 200:
                    r.read()
                    return r
                with open(dest, "wb") as f:
                    for chunk in r.iter_bytes(1 << 20):
                        h.update(chunk)
                        f.write(chunk)
            r.extensions["ytk_sha256"] = h.hexdigest()
            return r

        r = self.call("GET", path, send=fetch)
        got, said = r.extensions["ytk_sha256"], r.headers.get(sha_header, "")
        if said and said != got:
            raise self.error("damaged", f"{what} from the {self.service} at {self.url} arrived damaged (sha256 "
                                        f"{got[:12]}..., the {self.service} sent {said[:12]}...); run the command "
                                        "again", 3)
        return got

    # -- plumbing ------------------------------------------------------------------------------------
    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        backoff = min(10.0, 0.5 * 2 ** (state.attempt_number - 1)) + random.uniform(0, 0.25)
        if isinstance(exc, _Retryable) and exc.retry_after is not None:
            backoff = exc.retry_after
        left = self.retry_s - (state.seconds_since_start or 0.0)
        return max(0.0, min(backoff, MAX_WAIT_S, left))

    def _say_retry(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        what = status_line(exc.response) if isinstance(exc, _Retryable) else _transport(exc)
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        if self._on_retry is not None:
            self._on_retry(f"{self.service}: {what}; retrying in {wait:.1f} s")

    def _refusal(self, method: str, path: str, r: httpx.Response) -> Exception:
        """A 4xx answer as one error line: the service's own words and exit status where it gave them."""
        try:
            body = ErrorBody.model_validate_json(r.content)
            msg, code = body.error, body.exit_code
        except (ValidationError, ValueError):
            msg, code = status_line(r), 2 if r.status_code < 500 else 3
        wrong = self._wrong_service(r.status_code) if r.status_code in (401, 403, 404) else None
        if wrong is not None:
            return wrong
        if r.status_code in (401, 403):
            hint = f" ({self.token_hint})" if self.token_hint else ""
            return self.error("token", f"the {self.service} at {self.url} refused the token: {msg}{hint}", 2,
                              r.status_code)
        return self.error("refused", f"the {self.service} at {self.url} refused {method} {path}: {msg}", code,
                          r.status_code)

    def _wrong_service(self, status: int) -> Exception | None:
        """A usage error naming the kind of service at the URL (its health's ``service``) when it is another one
        than this client's: a refusal or an answer this client cannot read is then no fault of the token or ytk."""
        try:
            said = self._http.get(f"{API}/health", timeout=5.0).json().get("service")
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        if not isinstance(said, str) or not said or said == self.service:
            return None
        return self.error("usage", f"{self.url_flag} {self.url} is a {said}, not a {self.service}", 2, status)


def _transport(exc: BaseException | None) -> str:
    if exc is None:
        return "no answer"
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:200]


def status_line(r: httpx.Response) -> str:
    """``HTTP 503 Service Unavailable``: an HTTP response's status for a one-line message."""
    return f"HTTP {r.status_code} {r.reason_phrase}".strip()


def follow_job(client: Any, job: Any, label: str, task: Any, log_line: Callable[[str], None],
               detail: Callable[[Any, str], str], poll_s: tuple[float, float] = (0.2, 2.0)) -> Any:
    """Poll a job to its end: ``client.log(id, offset)`` (each new line to ``log_line``) and
    ``client.job(id)``, the state (and queue position) on ``task``'s progress line with ``detail(job,
    last log line)`` after it, updated only when it changes (without a terminal each update is a log
    line); waits grow from ``poll_s[0]`` to ``poll_s[1]``. Whatever the client raises is the caller's
    to explain (it knows how the user resumes)."""
    wait, offset, shown, last = poll_s[0], 0, "", ""
    while True:
        chunk = client.log(job.id, offset)
        job = client.job(job.id)
        for line in chunk.text.splitlines():
            log_line(line)
            last = line.strip() or last
        offset = chunk.next_offset
        where = f" ({job.queue_position} ahead)" if job.state == "queued" and job.queue_position else ""
        extra = detail(job, last)
        now = f"{label}: {job.state}{where}" + (f": {extra}" if extra else "")
        if now != shown:
            task.update(description=now)
            shown = now
        if job.done:
            return job
        time.sleep(wait)
        wait = min(poll_s[1], wait * 1.5)


def local_paths_out(text: str, *bases: Path) -> str:
    """A message from a job run in a service's folder, with the folder's paths (``bases``) taken out: the
    client knows the files by their archive names."""
    for base in bases:
        text = text.replace(f"{Path(base).resolve()}/", "").replace(f"{base}/", "")
    return text

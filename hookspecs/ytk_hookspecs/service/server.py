"""The server side every ytk job service shares (FastAPI): refusals as one line, bearer tokens,
streamed uploads with a size limit.

A route refuses with :class:`Refusal` (an HTTP status, one line for the user, the exit status the
client ends with); :func:`install_error_handlers` turns that, a request that fails validation and
any HTTP error into an :class:`~ytk_hookspecs.service.protocol.ErrorBody`, so a client never has to
parse an HTML page or a validation dump.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from ..errors import StageError
from ..models import Versioned
from .protocol import ErrorBody

__all__ = ["Refusal", "json_response", "install_error_handlers", "CannotListen", "listen", "serve_on", "key_name",
           "bearer_auth", "refuse_declared_size", "receive_upload", "received_archive", "add_common_routes"]


class Refusal(Exception):
    """A request a service turns down: the HTTP status, the message, the exit code a client should end with, and any
    headers (Retry-After)."""
    def __init__(self, status: int, message: str, exit_code: int = 2, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.exit_code, self.headers = status, exit_code, headers or {}


def json_response(model: Versioned, status: int = 200, headers: dict[str, str] | None = None) -> Any:
    """A pydantic model as a JSON HTTP response."""
    from fastapi.responses import Response

    return Response(model.model_dump_json(), status_code=status, media_type="application/json", headers=headers)


def install_error_handlers(app: Any) -> None:
    """Every refusal, invalid request and HTTP error of ``app`` becomes an :class:`ErrorBody`."""
    from fastapi import Request
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException as StarletteHTTPException

    @app.exception_handler(Refusal)
    async def _refusal(_: Request, e: Refusal) -> Any:
        return json_response(ErrorBody(error=str(e), exit_code=e.exit_code), e.status, e.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, e: RequestValidationError) -> Any:
        first = e.errors()[0] if e.errors() else {}
        where = ".".join(str(x) for x in first.get("loc", ()))
        return json_response(ErrorBody(error=f"bad request: {where}: {first.get('msg', 'invalid')}"), 400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, e: StarletteHTTPException) -> Any:
        return json_response(ErrorBody(error=str(e.detail), exit_code=2 if e.status_code < 500 else 3), e.status_code)


class CannotListen(StageError):
    """The service's address cannot be bound (a port in use, an address not of this machine): exit 2."""

    exit_code = 2


def listen(host: str, port: int) -> Any:
    """A socket bound to ``host:port``, before the service starts anything: a port another process holds is
    one line naming it (uvicorn would log it, then exit from inside its own code)."""
    import socket

    if not 0 < port < 65536:
        raise CannotListen(f"--port {port}: expected a TCP port, 1 to 65535")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise CannotListen(f"cannot listen on {host}:{port}: {e.strerror or e} (--host)") from None
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
    except OSError as e:
        sock.close()
        hint = {errno.EADDRINUSE: "another process holds it: stop that one or pick another --port",
                errno.EADDRNOTAVAIL: "--host must be an address of this machine (0.0.0.0: every interface)"}
        more = f" ({hint[e.errno]})" if e.errno in hint else ""
        raise CannotListen(f"cannot listen on {host}:{port}: {e.strerror or e}{more}") from None
    return sock


def serve_on(app: Any, sock: Any) -> None:
    """Serve ``app`` (uvicorn, warnings only) on a socket from :func:`listen`."""
    import uvicorn

    uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False)).run(sockets=[sock])


def key_name(authorization: str | None, keys: Mapping[str, str]) -> str:
    """The name of the key an ``Authorization: Bearer <key>`` header carries, else a 401 :class:`Refusal`.

    ``keys`` maps a key's name (who holds it: quotas and logs use it) to its secret. Every secret is
    compared, in constant time, so the answer's timing says nothing about which one came close."""
    scheme, _, given = (authorization or "").partition(" ")
    found = None
    for name, secret in keys.items():
        if hmac.compare_digest(given.strip().encode(), secret.encode()) and found is None:
            found = name
    if scheme.lower() != "bearer" or found is None:
        raise Refusal(401, "missing or wrong token" if authorization else "no token sent",
                      headers={"WWW-Authenticate": "Bearer"})
    return found


def bearer_auth(keys: Callable[[], Mapping[str, str]]) -> Callable[..., str]:
    """A FastAPI dependency: the caller's key name, or 401 (``keys()`` is asked on every request)."""
    from fastapi import Header

    def authorized(authorization: str | None = Header(None, description="Bearer <token>")) -> str:
        return key_name(authorization, keys())

    return authorized


def refuse_declared_size(request: Any, max_bytes: int, flag: str) -> None:
    """413 before reading a byte when the request declares a body over ``max_bytes``."""
    size = request.headers.get("content-length")
    if size is not None and size.isdigit() and int(size) > max_bytes:
        raise Refusal(413, f"the upload is {int(size)} bytes, over this worker's {max_bytes}-byte limit ({flag})")


async def receive_upload(request: Any, dest: Path, max_bytes: int, flag: str) -> str:
    """Stream the body to ``dest``, refusing it as soon as it passes ``max_bytes``; returns its sha256."""
    h, n = hashlib.sha256(), 0
    with open(dest, "wb") as f:
        async for chunk in request.stream():
            n += len(chunk)
            if n > max_bytes:
                raise Refusal(413, f"the upload passed this worker's {max_bytes}-byte limit ({flag})")
            h.update(chunk)
            f.write(chunk)
    if n == 0:
        raise Refusal(400, "empty upload: the body must be the job archive")
    return h.hexdigest()


@asynccontextmanager
async def received_archive(request: Any, incoming: Path, max_bytes: int, sent_sha256: str | None,
                           flag: str = "--max-upload-mb") -> AsyncIterator[tuple[Path, str]]:
    """A submit's body, streamed to a fresh file under ``incoming`` within the size limit and checked against
    the sha256 the client sent: yields ``(path, sha256)``; the file is gone afterwards unless moved away."""
    refuse_declared_size(request, max_bytes, flag)
    incoming.mkdir(parents=True, exist_ok=True)
    path = incoming / f"{uuid.uuid4().hex}.tgz"
    try:
        digest = await receive_upload(request, path, max_bytes, flag)
        if sent_sha256 and sent_sha256 != digest:
            raise Refusal(400, "the upload arrived damaged (its sha256 differs from the one sent); send it again")
        yield path, digest
    finally:
        path.unlink(missing_ok=True)


def add_common_routes(app: Any, *, service: str, record: type[Versioned], job_or_404: Callable[[str], Versioned],
                      log_of: Callable[[str], Path], auth: Callable[..., str], service_tag: str) -> None:
    """The routes every job service has: ``GET /v1/health`` (no token; names ``service``), ``GET /v1/jobs/{id}``
    (the ``record``) and ``GET /v1/jobs/{id}/log?offset=N`` (a LogChunk of the file ``log_of(id)``).
    ``job_or_404`` answers a job's record or refuses with 404."""
    from fastapi import Depends, Query

    from .protocol import API, Health, LogChunk, read_log_chunk

    @app.get(f"{API}/health", response_model=Health, tags=[service_tag])
    def health() -> Any:
        return json_response(Health(service=service))

    @app.get(f"{API}/jobs/{{job_id}}", response_model=record, tags=["jobs"], dependencies=[Depends(auth)],
             responses={404: {"model": ErrorBody}})
    def get_job(job_id: str) -> Any:
        return json_response(job_or_404(job_id))

    @app.get(f"{API}/jobs/{{job_id}}/log", response_model=LogChunk, tags=["jobs"], dependencies=[Depends(auth)],
             responses={404: {"model": ErrorBody}})
    def job_log(job_id: str, offset: int = Query(0, ge=0)) -> Any:
        """The job's log from byte ``offset``; poll again from ``next_offset`` to follow it."""
        job_or_404(job_id)
        return json_response(read_log_chunk(log_of(job_id), offset))

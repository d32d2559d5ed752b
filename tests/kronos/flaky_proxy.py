"""Test-only: a reverse proxy in front of a worker that answers bursts of 503 and 429 (with Retry-After) and
loses the answer to the first submit after passing it on, as a flaky network or load balancer would."""

from __future__ import annotations

import threading
import time

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.kronos.conftest import free_port

FORWARD = ("authorization", "idempotency-key", "x-ytk-archive-sha256", "content-type")
BACK = ("content-type", "x-ytk-bundle-sha256", "retry-after")


class FlakyProxy:
    def __init__(self, upstream: str, job_503s: int = 3, info_429s: int = 1) -> None:
        self.upstream = upstream
        self.job_503s, self.info_429s = job_503s, info_429s
        self.post_lost = False
        self.refused: list[str] = []  # "503 GET /v1/jobs/..." for every refusal served
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        app = Starlette(routes=[Route("/{path:path}", self._handle, methods=["GET", "POST"])])
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        end = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < end, "the proxy did not start"
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def _refuse(self, status: int, request: Request, after: str) -> Response:
        self.refused.append(f"{status} {request.method} {request.url.path}")
        return Response(b"busy", status_code=status, headers={"Retry-After": after})

    async def _handle(self, request: Request) -> Response:
        body = await request.body()
        path = request.url.path
        headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARD}
        async with httpx.AsyncClient(base_url=self.upstream, timeout=30) as up:
            if path == "/v1/info" and self.info_429s > 0:
                self.info_429s -= 1
                return self._refuse(429, request, "0.2")
            if request.method == "POST" and not self.post_lost:
                await up.post(path, content=body, headers=headers)  # the job is created upstream ...
                self.post_lost = True
                return self._refuse(503, request, "0.2")  # ... and the client never hears of it
            if request.method == "GET" and path.startswith("/v1/jobs/") and self.job_503s > 0:
                self.job_503s -= 1
                return self._refuse(503, request, "0.3")
            r = await up.request(request.method, path, params=request.query_params, content=body, headers=headers)
        return Response(r.content, status_code=r.status_code,
                        headers={k: v for k, v in r.headers.items() if k.lower() in BACK})

"""The Gaia API's client: the shared retrying client (:mod:`ytk_hookspecs.service.http`) speaking
:mod:`.protocol`.

Transport errors, 429 (a key over its quota, a busy service) and 5xx are retried, honouring
``Retry-After``, for the retry budget (``YTK_GAIA_RETRY_S``, default 120 s); a submit carries the
job's content hash as its idempotency key, so a retried or repeated submit never runs a job twice.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from ytk_hookspecs.models import SupportAnswer, sha256_file
from ytk_hookspecs.service.http import RetryingClient
from ytk_hookspecs.service.protocol import API, ARCHIVE_SHA_HEADER, IDEMPOTENCY_HEADER, LogChunk

from .config import KEY_ENV, RETRY_ENV, ClientSettings
from .protocol import FILE_SHA_HEADER, JobRecord, ServiceInfo, SubmitResponse, SupportQuery

SUBMIT_ROUTES = {"kernelgen": f"{API}/kernelgen/jobs", "build": f"{API}/builds"}


class GaiaClient(RetryingClient):
    service = "gaia service"
    retry_hint = RETRY_ENV
    token_hint = f"set {KEY_ENV}, or api_key under [backends.gaia] in ytk.toml, to a key the service accepts"

    def __init__(self, settings: ClientSettings, retry_s: float | None = None) -> None:
        super().__init__(settings.url, settings.api_key, settings.retry_s if retry_s is None else retry_s,
                         url_flag=settings.url_from)

    def info(self, arch: str | None = None) -> ServiceInfo:
        return self.model(ServiceInfo, self.call("GET", f"{API}/info", params={"arch": arch} if arch else {}))

    def supports(self, query: SupportQuery) -> SupportAnswer:
        return self.model(SupportAnswer, self.call("POST", f"{API}/kernelgen/supports",
                                                   content=query.model_dump_json(),
                                                   headers={"Content-Type": "application/json"}))

    def submit(self, kind: str, archive: Path, key: str) -> SubmitResponse:
        """Upload ``archive`` as a ``kind`` job under idempotency ``key`` (each try re-reads the file)."""
        headers = {IDEMPOTENCY_HEADER: key, ARCHIVE_SHA_HEADER: sha256_file(archive),
                   "Content-Type": "application/gzip"}

        def send() -> httpx.Response:
            with open(archive, "rb") as f:
                return self._http.post(SUBMIT_ROUTES[kind], content=f, headers=headers)

        return self.model(SubmitResponse, self.call("POST", SUBMIT_ROUTES[kind], send=send))

    def job(self, job_id: str) -> JobRecord:
        return self.model(JobRecord, self.call("GET", f"{API}/jobs/{job_id}"))

    def log(self, job_id: str, offset: int = 0) -> LogChunk:
        return self.model(LogChunk, self.call("GET", f"{API}/jobs/{job_id}/log", params={"offset": offset}))

    def cancel(self, job_id: str) -> JobRecord:
        return self.model(JobRecord, self.call("POST", f"{API}/jobs/{job_id}/cancel"))

    def download_file(self, job_id: str, name: str, dest: Path) -> str:
        return self.download(f"{API}/jobs/{job_id}/files/{name}", dest, FILE_SHA_HEADER, f"{name} of job {job_id}")

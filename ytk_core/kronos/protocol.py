"""What the Kronos worker and its client say to each other: every request, response and job record.

The job upload is one gzip'd tar (:data:`JOB_SPEC` at its root, the compile's inputs under
``inputs/``, each plugin under ``plugins/<i>/``); the result is the engine bundle the local compile
would have written. Every model is :class:`~ytk_hookspecs.models.Versioned`: a newer peer is refused
with a message that says so.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Literal

from pydantic import Field, field_validator

from ytk_hookspecs.models import Versioned
from ytk_hookspecs.service.protocol import (API, ARCHIVE_SHA_HEADER, AUTH_HEADER, IDEMPOTENCY_HEADER,  # noqa: F401
                                            ErrorBody, Health, LogChunk, utcnow)

#: The archive member holding the :class:`JobSpec`.
JOB_SPEC = "job.json"
BUNDLE_SHA_HEADER = "X-Ytk-Bundle-Sha256"
#: The default port of ``ytk worker kronos``.
DEFAULT_PORT = 8470

JobState = Literal["queued", "running", "succeeded", "failed", "interrupted"]
FINAL_STATES: tuple[str, ...] = ("succeeded", "failed", "interrupted")


def _plain_relative(path: str) -> str:
    p = PurePosixPath(path)
    if not path or p.is_absolute() or ".." in p.parts or "\\" in path:
        raise ValueError(f"{path!r} is not a plain relative path")
    return path


class JobPlugin(Versioned):
    """One plugin of a job: its ``.so`` in the archive (the verdict, if any, beside it)."""

    path: str = Field(description="archive path of the .so, e.g. plugins/0/DwConv.so")
    sha256: str

    _check_path = field_validator("path")(classmethod(lambda cls, v: _plain_relative(v)))


class JobSpec(Versioned):
    """What to compile: exactly the arguments of a local ``ytk embedded compile``."""

    arch: str
    precision: Literal["fp16", "fp32"]
    onnx: str = Field("inputs/model.onnx", description="archive path of the ONNX")
    npz: str = Field("inputs/model.npz", description="archive path of the inputs")
    onnx_sha256: str
    npz_sha256: str
    plugins: list[JobPlugin] = Field(default_factory=list)
    iterations: int = Field(10, ge=1, le=100_000)
    warmup: int = Field(3, ge=0, le=100_000)
    allow_unused_plugin: bool = False
    allow_unverified: bool = False
    engine: str | None = Field(None, description="the engine the client expects the worker to run (None: any)")
    output_name: str = Field(description="file name of the bundle (its label comes from it)")

    _check_paths = field_validator("onnx", "npz")(classmethod(lambda cls, v: _plain_relative(v)))

    @field_validator("output_name")
    @classmethod
    def _plain_name(cls, v: str) -> str:
        if not v or "/" in v or "\\" in v or v in (".", "..") or v.startswith("."):
            raise ValueError(f"output_name {v!r} must be a plain file name")
        return v


class JobRecord(Versioned):
    """A job as the worker keeps it on disk (``<state dir>/jobs/<id>/record.json``) and reports it."""

    id: str
    idempotency_key: str
    archive_sha256: str
    state: JobState = "queued"
    spec: JobSpec
    engine: str = Field(description="the engine backend the worker runs the job with")
    created: str = Field(default_factory=utcnow)
    started: str | None = None
    finished: str | None = None
    attempts: int = Field(0, description="how many times the job was started (a re-submit restarts an "
                                         "interrupted one)")
    message: str = Field("", description="the job's latest log line, or why it stopped")
    error: str = Field("", description="the compile's error, one paragraph, when it failed")
    exit_code: int = Field(0, description="the exit status the same compile would have had locally")
    warnings: list[str] = Field(default_factory=list)
    queue_position: int | None = Field(None, description="jobs ahead of this one (queued jobs only)")
    bundle_sha256: str | None = None
    bundle_bytes: int | None = None

    @property
    def done(self) -> bool:
        return self.state in FINAL_STATES


class SubmitResponse(Versioned):
    job: JobRecord
    created: bool = Field(description="False when the idempotency key named a job the worker already had")
    restarted: bool = Field(False, description="True when that job had been interrupted and was queued again")


class JobList(Versioned):
    jobs: list[JobRecord]


class WorkerInfo(Versioned):
    """``GET /v1/info``: what this worker runs and accepts."""

    worker: Literal["kronos"] = "kronos"
    ytk_version: str
    engine: str
    engine_version: str
    simulated: bool
    engine_available: bool
    engine_reason: str = ""
    arch: str = Field(description="this machine's target as `-a auto` resolves it here")
    device: str = Field(description="the GPU the engine runs on, as it names it")
    slots: int = Field(description="engine builds run at once (one per GPU)")
    max_upload_bytes: int
    max_extract_bytes: int
    max_members: int
    queued: int = 0
    running: int = 0

"""What the Gaia service and its client say to each other: the API's routes, requests and records.

=========================================  ================================================================
``GET  /v1/health``                        liveness, no key needed
``GET  /v1/info?arch=SPEC``                :class:`ServiceInfo`: generators and builder, can each serve SPEC
``POST /v1/kernelgen/supports``            :class:`SupportQuery` -> ``SupportAnswer``: would it take a region
``POST /v1/kernelgen/jobs``                a kernel generation job: the archive (:class:`KernelJobSpec`)
``POST /v1/builds``                        a plugin build job: the archive (:class:`BuildJobSpec`)
``GET  /v1/jobs``                          :class:`JobList`: the caller's jobs, newest first
``GET  /v1/jobs/{id}``                     :class:`JobRecord`
``GET  /v1/jobs/{id}/log?offset=N``        ``LogChunk``: the job's log from byte N
``GET  /v1/jobs/{id}/files/{name}``        a result: ``module_source.py``, ``report.json`` (kernelgen);
                                           ``plugin.so``, ``description.json`` (build)
``POST /v1/jobs/{id}/cancel``              :class:`JobRecord`: a queued or running job is cancelled
=========================================  ================================================================

A submit's body is one gzip'd tar: ``job.json`` (the spec) and ``inputs/`` (the region's ``.pt2``, or
the kernel source), with the headers ``Idempotency-Key`` (the client sends the content hash of the
job, so a re-submit of the same region finds its job) and ``X-Ytk-Archive-Sha256``. Every route but
health needs ``Authorization: Bearer <key>``; every refusal is an ``ErrorBody``.
"""

from __future__ import annotations

import hashlib
from pathlib import PurePosixPath
from typing import Annotated, ClassVar, Literal, Union

from pydantic import Field, field_validator

from ytk_hookspecs.models import Candidate, DeploymentTarget, RegionSketch, Reoptimization, Versioned
from ytk_hookspecs.models.build import EngineApi
from ytk_hookspecs.service.protocol import utcnow

#: The default port of ``ytk worker gaia`` (Kronos listens on 8470).
DEFAULT_PORT = 8471
JOB_SPEC = "job.json"
INPUTS = "inputs"
TOP_LEVEL = (JOB_SPEC, INPUTS)
FILE_SHA_HEADER = "X-Ytk-File-Sha256"
#: what a finished job offers for download, per kind
RESULT_FILES: dict[str, tuple[str, ...]] = {"kernelgen": ("module_source.py", "report.json"),
                                            "build": ("plugin.so", "description.json")}

JobState = Literal["queued", "running", "succeeded", "failed", "cancelled", "interrupted"]
FINAL_STATES: tuple[str, ...] = ("succeeded", "failed", "cancelled")


def _plain_relative(path: str) -> str:
    p = PurePosixPath(path)
    if not path or p.is_absolute() or ".." in p.parts or "\\" in path or p.parts[0] != INPUTS:
        raise ValueError(f"{path!r} is not a plain relative path under {INPUTS}/")
    return path


class KernelJobSpec(Versioned):
    """A kernel generation job: exactly what a local ``ytk kernelgen compile`` hands its generator."""

    kind: Literal["kernelgen"] = "kernelgen"
    generator: str | None = Field(None, description="the service's generator to run (None: the service's default)")
    reference: str = Field(f"{INPUTS}/region.pt2", description="archive path of the region's .pt2")
    reference_sha256: str
    gpu: str
    arch: str | None = None
    precision: Literal["fp16", "fp32"] = "fp16"
    config: dict[str, str] = Field(default_factory=dict, description="the generator's own --config keys")
    deployment_target: DeploymentTarget = "tensorrt"
    reoptimize: Reoptimization | None = Field(None, description="a plugged region: what the new kernel must beat")
    plugin_name: str | None = None
    candidate: Candidate | None = Field(None, description="the region's candidates.json entry")

    _check_path = field_validator("reference")(classmethod(lambda cls, v: _plain_relative(v)))


class BuildJobSpec(Versioned):
    """A plugin build job: the kernel source (already renamed and contract-checked), for one target."""

    kind: Literal["build"] = "build"
    source: str = Field(f"{INPUTS}/source.module_source.py", description="archive path of the kernel source")
    source_sha256: str
    plugin_name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    arch: str
    engine_api: EngineApi | None = None

    _check_path = field_validator("source")(classmethod(lambda cls, v: _plain_relative(v)))


JobSpec = Annotated[Union[KernelJobSpec, BuildJobSpec], Field(discriminator="kind")]


def content_hash(spec: KernelJobSpec | BuildJobSpec) -> str:
    """The job's content: its spec, which names its inputs by sha256. The same region (or source) asked
    again is the same hash: the client's idempotency key and the service's cache key."""
    return hashlib.sha256(spec.model_dump_json(exclude={"schema_version"}).encode()).hexdigest()


class JobRecord(Versioned):
    """One job as the service keeps it (``<state dir>/jobs/<id>/record.json``)."""

    id: str
    kind: Literal["kernelgen", "build"]
    owner: str = Field(description="the name of the API key that submitted it")
    idempotency_key: str = Field(description="owner/key: a key is the submitter's own")
    archive_sha256: str
    content_sha256: str = Field(description="the result cache's key: the spec's hash, the backend and the "
                                "fingerprint of its installed code")
    backend: str = Field(description="the generator or builder that runs it")
    spec: JobSpec
    state: JobState = "queued"
    created: str = Field(default_factory=utcnow)
    started: str | None = None
    finished: str | None = None
    attempts: int = 0
    message: str = Field("", description="what the job is doing, or why it stopped")
    error: str = ""
    exit_code: int = 0
    cached_from: str | None = Field(None, description="the job whose results this one reused (same content)")
    dispatcher: Literal["local", "ray"] = "local"
    outputs: dict[str, str] = Field(default_factory=dict, description="result file -> sha256 (succeeded jobs)")
    queue_position: int | None = Field(None, description="jobs ahead of this one (queued jobs only)")

    @property
    def done(self) -> bool:
        return self.state in FINAL_STATES


class SubmitResponse(Versioned):
    job: JobRecord
    created: bool = Field(description="False when the idempotency key named a job the service already had")
    cached: bool = Field(False, description="True when the results came from an earlier job of the same content")


class JobList(Versioned):
    jobs: list[JobRecord]


class BackendStatus(Versioned):
    """One generator or builder of the service, and whether it can serve the arch asked about."""

    name: str
    version: str
    simulated: bool
    available: bool
    reason: str = ""
    config_keys: dict[str, str] = Field(default_factory=dict)


class ServiceInfo(Versioned):
    """``GET /v1/info``: what this service runs and accepts."""

    service: Literal["gaia"] = "gaia"
    version: str
    arch: str | None = Field(None, description="the arch the availabilities below answer for")
    generators: list[BackendStatus]
    default_generator: str | None
    builder: BackendStatus | None
    dispatcher: Literal["local", "ray"]
    slots: int = Field(description="jobs run at once here (local), or the Ray cluster's resources decide (0)")
    max_upload_bytes: int
    max_extract_bytes: int
    max_members: int
    max_active_per_key: int
    queued: int = 0
    running: int = 0


class SupportQuery(Versioned):
    """``POST /v1/kernelgen/supports``: what propose or the autoloop knows of a region (no ``.pt2``). Schema 2
    added the sketch's ``channels``: an older service refuses the query as written by a newer ytk."""

    SCHEMA_VERSION: ClassVar[int] = 2

    generator: str | None = None
    sketch: RegionSketch | None = None
    candidate: Candidate | None = None
    precision: Literal["fp16", "fp32"] = "fp16"
    config: dict[str, str] = Field(default_factory=dict)
    arch: str | None = None


class JobOutcome(Versioned):
    """What a job's run reports (``result.json`` in its folder, or a Ray task's return)."""

    state: Literal["succeeded", "failed"]
    error: str = ""
    exit_code: int = 0
    message: str = ""
    outputs: dict[str, str] = Field(default_factory=dict)

"""Registers the ``gaia`` backend (roles kernelgen and builder, over the Gaia service's API) and the
``ytk worker gaia`` command that serves that API.

Automatic choice: kernelgen ``gaia`` ranks first when a service is configured (``YTK_GAIA_URL`` or
``[backends.gaia] url``); builder ``gaia`` ranks after ``nvcc`` (a local toolchain needs no upload).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ytk_hookspecs import StageContext, hookimpl
from ytk_hookspecs.models import (FORWARDED_CONFIG_KEYS, ArchSpec, Availability, BackendInfo, BuildRequest, BuildResult,
                                  KernelGenRequest, KernelGenResult, SupportAnswer, SupportRequest)

from . import __version__

NAME = "gaia"
#: a supports() question must be fast: the service gets this long before the job decides instead
SUPPORTS_RETRY_S = 5.0
#: after a service could not be reached, supports() does not ask it again for this long: a propose over dozens
#: of candidates would otherwise wait the retry budget once per candidate before the first job says so
UNREACHABLE_MEMO_S = 60.0
_clock = time.monotonic


class GaiaBackend:
    """:class:`ytk_hookspecs.roles.KernelGenBackend` and :class:`~ytk_hookspecs.roles.BuilderBackend` over HTTP."""

    info = BackendInfo(name=NAME, roles=["kernelgen", "builder"], version=__version__,
                       description="Gaia service: kernel generation and plugin builds over HTTP (`ytk worker gaia`; "
                                   "YTK_GAIA_URL, YTK_GAIA_API_KEY)",
                       auto_priority={"kernelgen": 30, "builder": 10},
                       # the service's generator reads its own keys: checked against /v1/info before a job is sent
                       config_keys={FORWARDED_CONFIG_KEYS: "any key the service's generator reads (checked against "
                                                           "the service's /v1/info before a job is sent)"})

    def __init__(self) -> None:
        self._unreachable: dict[str, tuple[float, str]] = {}  # url -> (monotonic time, why) of its last failure

    def availability(self, arch: ArchSpec | None = None) -> Availability:
        """Available when a service is configured; whether it can serve ``arch`` is asked before each job."""
        from .config import URL_ENV, client_settings
        from .errors import GaiaUsageError

        try:
            settings = client_settings()
        except GaiaUsageError as e:  # a service is configured, wrongly: the job says so (exit 2), not "unavailable"
            return Availability(available=True, reason=f"Gaia service settings: {e}")
        if settings is None:
            return Availability(available=False, reason=f"no Gaia service configured ({URL_ENV} or [backends.gaia] "
                                                        "url in ytk.toml)")
        return Availability(available=True, reason=f"Gaia service at {settings.url}", details={"url": settings.url})

    # -- kernelgen ------------------------------------------------------------------------------
    def supports(self, request: SupportRequest, ctx: StageContext) -> SupportAnswer:
        from ytk_hookspecs.service.http import CONFIG_FAILURES, ServiceError

        from .client import GaiaClient
        from .config import client_settings
        from .protocol import SupportQuery

        settings = client_settings(ctx.config)
        if settings is None:
            return SupportAnswer(supported=False, certain=False, backend=NAME, why="no Gaia service configured")
        last = self._unreachable.get(settings.url)
        if last is not None and _clock() - last[0] < UNREACHABLE_MEMO_S:
            return self._unasked(f"{last[1]}; not asked again for {UNREACHABLE_MEMO_S:.0f} s")
        query = SupportQuery(generator=settings.generator, sketch=request.sketch, candidate=request.candidate,
                             precision=request.precision, config=dict(request.config), arch=request.arch)
        try:
            with GaiaClient(settings, retry_s=min(SUPPORTS_RETRY_S, settings.retry_s)) as client:
                ans = client.supports(query)
        except ServiceError as e:
            if e.kind in CONFIG_FAILURES:  # wrong settings: every job would fail so, and the user must fix them
                raise
            if e.kind in ("unreachable", "busy"):
                self._unreachable[settings.url] = (_clock(), str(e))
            return self._unasked(str(e))
        except Exception as e:  # noqa: BLE001  -- no answer is no refusal: the job decides
            return self._unasked(str(e))
        self._unreachable.pop(settings.url, None)
        return ans.model_copy(update={"backend": f"{NAME}/{ans.backend}" if ans.backend else NAME})

    @staticmethod
    def _unasked(why: str) -> SupportAnswer:
        return SupportAnswer(supported=True, certain=False, backend=NAME,
                             why=f"the service could not be asked ({' '.join(why.split())[:200]}); the job decides")

    def submit(self, request: KernelGenRequest, ctx: StageContext) -> KernelGenResult:
        from .jobs import generate

        return generate(request, ctx)

    def fetch(self, job_id: str, output: Path, ctx: StageContext) -> KernelGenResult | None:
        from .jobs import fetch

        return fetch(job_id, Path(output), ctx)

    # -- builder --------------------------------------------------------------------------------
    def build_plugin(self, request: BuildRequest, ctx: StageContext) -> BuildResult:
        from .jobs import build

        return build(request, ctx)


@hookimpl
def ytk_register_backends(register: Any) -> None:
    register(GaiaBackend())


@hookimpl
def ytk_cli_commands(cli: Any) -> None:
    from .cli import add_commands

    add_commands(cli)

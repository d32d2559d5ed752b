"""A kernel generator that looks at the region it is given and declines it honestly.

Replace ``supports`` and ``submit`` with your generator: ``submit`` writes a kernel source bundle
(``ytk_hookspecs.kernel_source.KernelSource``) to ``request.output`` and its report to
``report_path(request.output)``, and returns status "done". Select it with
``ytk kernelgen compile --kernelgen example ...``, ``YTK_KERNELGEN=example``, or
``[backends] kernelgen = "example"`` in ytk.toml. Check it with ``pytest --ytk-backend example``
(this template fails that check: it generates no kernel).
"""

from __future__ import annotations

from pathlib import Path

from ytk_hookspecs import StageContext, hookimpl
from ytk_hookspecs.models import (ArchSpec, Availability, BackendInfo, KernelGenRequest, KernelGenResult,
                                  SupportAnswer, SupportRequest)


class ExampleGenerator:
    """A :class:`ytk_hookspecs.roles.KernelGenBackend`."""

    # No auto_priority: an installed third-party backend is never chosen unless the user asks.
    info = BackendInfo(name="example", roles=["kernelgen"], version="0.1.0",
                       description="template backend: declines every region (replace with your generator)")

    def availability(self, arch: ArchSpec | None = None) -> Availability:
        return Availability(available=True, reason="pure Python, runs anywhere")

    def supports(self, request: SupportRequest, ctx: StageContext) -> SupportAnswer:
        return SupportAnswer(supported=False, backend="example", why="this template generates no kernel")

    def submit(self, request: KernelGenRequest, ctx: StageContext) -> KernelGenResult:
        ctx.log.info("example backend called", reference=str(request.reference), gpu=request.gpu)
        return KernelGenResult(job_id="example-0", status="failed",
                               message=f"example backend: no generator for {request.reference.name} "
                                       "(this template declines every region)")

    def fetch(self, job_id: str, output: Path, ctx: StageContext) -> KernelGenResult | None:
        return None  # jobs finish inside submit: there is never one to fetch


@hookimpl
def ytk_register_backends(register):  # type: ignore[no-untyped-def]
    register(ExampleGenerator())

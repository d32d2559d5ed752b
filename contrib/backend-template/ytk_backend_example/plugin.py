"""A kernelgen backend that inspects the region it is given and declines it honestly.

Replace the body of ``ytk_kernelgen_submit`` with your generator: write a kernel source bundle
(``ytk_hookspecs.kernel_source.KernelSource``) to ``request.output`` and return status "done".
Select it with ``ytk kernelgen compile --kernelgen example ...``, ``YTK_KERNELGEN=example``, or
``[backends] kernelgen = "example"`` in ytk.toml.
"""

from __future__ import annotations

from ytk_hookspecs import StageContext, hookimpl
from ytk_hookspecs.models import Availability, BackendInfo, KernelGenRequest, KernelGenResult


@hookimpl
def ytk_register_backend(register):  # type: ignore[no-untyped-def]
    # No auto_priority: an installed third-party backend is never chosen unless the user asks.
    register(BackendInfo(name="example", roles=["kernelgen"], version="0.1.0",
                         description="template backend: declines every region (replace with your generator)"),
             lambda: Availability(available=True, reason="pure Python, runs anywhere"))


@hookimpl
def ytk_kernelgen_submit(request: KernelGenRequest, ctx: StageContext) -> KernelGenResult:
    ctx.log.info("example backend called", reference=str(request.reference), gpu=request.gpu)
    return KernelGenResult(job_id="example-0", status="failed",
                           message=f"example backend: no generator for {request.reference.name} "
                                   "(this template declines every region)")

"""Ahead-of-time compilation of a Triton kernel to cubins, for any SM, on any machine (no GPU needed).

Triton compiles for an explicit target (``GPUTarget("cuda", 87, 32)``) with its own bundled ptxas, so
the kernels a generator chose on the H200 build for DRIVE Orin's sm_87 on the x86 host as well.
"""

from __future__ import annotations

import base64
from typing import Any

from .plan import KernelBinary, PlanError, ptx_entry


def triton_version() -> str:
    try:
        import triton
    except ImportError:
        return ""
    return str(triton.__version__)


def _need_triton() -> Any:
    try:
        import triton
    except ImportError:
        raise PlanError("Triton is not installed: pip install 'ytk-backend-triton[aot]' (or pip install triton)") \
            from None
    return triton


def binary(compiled_by_sm: dict[int, Any], user_params: int) -> KernelBinary:
    """A :class:`KernelBinary` from Triton ``CompiledKernel`` objects of one kernel, one per SM."""
    if not compiled_by_sm:
        raise PlanError("no compiled kernel given")
    first = next(iter(compiled_by_sm.values()))
    md = first.metadata
    name, params = ptx_entry(first.asm["ptx"], md.name)
    for sm, ck in compiled_by_sm.items():
        other_name, other = ptx_entry(ck.asm["ptx"], md.name)
        if (other_name, other) != (name, params):
            raise PlanError(f"kernel {name}: its sm_{sm} build takes other parameters than the others")
        if ck.metadata.num_warps != md.num_warps:
            # one block size per kernel in the plan (its grid and launches are one); shared memory may differ
            # per SM (the launcher takes the loaded cubin's own), warps may not
            raise PlanError(f"kernel {name}: its sm_{sm} build needs {ck.metadata.num_warps} warps, the others "
                            f"{md.num_warps}")
    for key in ("num_ctas",):
        if getattr(md, key, 1) not in (1, None):
            raise PlanError(f"kernel {name}: {key}={getattr(md, key)} (thread-block clusters) is not launched by "
                            "the plan's launcher")
    if getattr(md, "launch_cooperative_grid", False) or getattr(md, "launch_pdl", False):
        raise PlanError(f"kernel {name} needs a cooperative or programmatic-dependent launch")
    return KernelBinary(
        name=name, params=params, num_warps=md.num_warps, shared_bytes=md.shared,
        shared_by_sm={sm: ck.metadata.shared for sm, ck in compiled_by_sm.items() if ck.metadata.shared != md.shared},
        cubins={sm: base64.b64encode(ck.asm["cubin"]).decode() for sm, ck in sorted(compiled_by_sm.items())},
        global_scratch_bytes=int(getattr(md, "global_scratch_size", 0) or 0),
        profile_scratch_bytes=int(getattr(md, "profile_scratch_size", 0) or 0),
        user_params=user_params)


def compile_jit(fn: Any, signature: dict[str, str], constexprs: dict[str, Any], sms: list[int],
                num_warps: int = 4, num_stages: int = 3) -> KernelBinary:
    """Compile the ``@triton.jit`` function ``fn`` for every SM in ``sms``. ``signature`` maps each
    parameter to its Triton type (``*fp16``, ``i32``, ... or ``constexpr``), ``constexprs`` gives the
    constexpr values."""
    triton = _need_triton()
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs)
    out = {sm: triton.compile(src, target=GPUTarget("cuda", sm, 32),
                              options={"num_warps": num_warps, "num_stages": num_stages}) for sm in sms}
    return binary(out, user_params=sum(1 for t in signature.values() if t != "constexpr"))

"""``ytk kernelgen``: kernel generation (export, compile, get)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .options import JsonOpt, KernelgenOpt

app = typer.Typer(no_args_is_help=True)


@app.command("export")
def export(
    model: Annotated[Path, typer.Argument(help="model.py with a Model class and get_fwd_args()")],
    output: Annotated[Path, typer.Option("-o", "--output", help=".pt2 to write")],
    json_: JsonOpt = False,
) -> None:
    """Export a model.py as a torch.export program (.pt2) for a standalone kernel."""
    from ..runtime import emit_json, stdout
    from ..stages.kernelgen import run_kernelgen_export

    out = run_kernelgen_export(model, output)
    if json_:
        emit_json({"pt2": str(out)})
        return
    stdout.print(f"wrote {out}", highlight=False, markup=False)


@app.command("compile")
def compile_(
    reference: Annotated[Path, typer.Option("-r", "--reference", help="region .pt2 from prepare --plugin")],
    gpu: Annotated[str, typer.Option("-g", "--gpu", help="eval worker GPU (match the target's arch)")],
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="<Name>.module_source.py to write "
                                                   "(required unless --dry-run)")] = None,
    config: Annotated[Optional[list[str]], typer.Option("--config", help="key=value (repeatable); "
                                                        "deployment_target=tensorrt is required")] = None,
    arch: Annotated[Optional[str], typer.Option("-a", "--arch", help="target arch spec (optional; "
                                                "refines the GPU)")] = None,
    precision: Annotated[str, typer.Option("-p", "--precision", help="engine precision the kernel is for")] = "fp16",
    candidates: Annotated[Optional[Path], typer.Option(
        "--candidates", help="candidates.json (default: in the .pt2's prepare dir)")] = None,
    kernelgen: KernelgenOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="say whether the generator would take the region and "
                                          "as what, without starting a job (exit 3 when it would refuse)")] = False,
    json_: JsonOpt = False,
) -> None:
    """Generate a kernel for a carved region, then check it against the region's contract."""
    from ..errors import UsageError
    from ..runtime import emit_json, stdout
    from ..stages.kernelgen import run_kernelgen_compile, run_kernelgen_dry_run

    if dry_run:
        ans = run_kernelgen_dry_run(reference, config, kernelgen, arch, precision, candidates, gpu=gpu)
        if json_:
            emit_json(ans)
        else:
            kind = f" ({ans.kind})" if ans.kind else ""
            if ans.supported:
                line = f"{ans.backend}: would generate{kind}: {ans.why}" + (
                    "" if ans.certain else " (not certain: the job decides)")
            elif ans.certain:
                line = f"{ans.backend}: would refuse{kind}: {ans.why}"
            else:  # no certain answer (the generator could not tell, or failed to answer)
                line = f"{ans.backend}: cannot say before a job{kind}: {ans.why}"
            stdout.print(line, highlight=False, markup=False)
        if not ans.supported:  # the answer above is the one line (a second, on stderr, only repeated it)
            raise SystemExit(3)
        return
    if output is None:
        raise UsageError("kernelgen compile needs -o/--output <Name>.module_source.py (only --dry-run writes "
                         "nothing)")

    out = run_kernelgen_compile(reference, gpu, output, config, kernelgen, arch, precision, candidates)
    if json_:
        emit_json(out.as_dict())
        return
    _print(out, stdout)


@app.command("get")
def get(
    job: Annotated[str, typer.Argument(help="job id printed by kernelgen compile")],
    output: Annotated[Path, typer.Option("-o", "--output", help="where to write the source bundle")],
    kernelgen: KernelgenOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Fetch a finished kernel generation job's result."""
    from ..runtime import emit_json, stdout
    from ..stages.kernelgen import run_kernelgen_get

    out = run_kernelgen_get(job, output, kernelgen)
    if json_:
        emit_json(out.as_dict())
        return
    _print(out, stdout)


def _print(out, stdout) -> None:  # type: ignore[no-untyped-def]
    res = out.result
    p = dict(highlight=False, markup=False)
    stdout.print(f"job {res.job_id}: {res.status}  ({out.selection})", **p)
    if res.status == "running":
        stdout.print(f"still running; fetch it later with: ytk kernelgen get {res.job_id} -o <X>.module_source.py", **p)
        return
    stdout.print(f"source  {res.source}", **p)
    if res.report:
        stdout.print(f"report  {res.report}", **p)
    r = out.report
    if r is not None:
        sim = "  SIMULATED" if r.simulated else ""
        times = ", ".join(f"{t:.3f}" for t in (next((c.time_ms_per_site for c in r.candidates
                                                     if c.variant == r.winner), []))) or "-"
        stdout.print(f"kernel  winner {r.winner or '-'} of {len(r.candidates)} candidate(s), measured on "
                     f"{r.measured_on}; ms/site {times}{sim}", **p)
        stdout.print("        compare the ms/site with the region's TensorRT time per site (propose --verbose), "
                     "not with the torch speedup", **p)
    if out.contract is not None:
        c = out.contract
        what = f"region {out.candidate}" if out.candidate else "its own declarations (no region known)"
        stdout.print(f"contract OK against {what}" + (f" ({len(c.warnings)} warning(s))" if c.warnings else ""), **p)

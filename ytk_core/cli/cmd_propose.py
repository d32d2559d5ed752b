"""`ytk embedded propose`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import UsageError
from .embedded import app
from .options import JsonOpt, KernelgenOpt


@app.command("propose")
def propose(
    profile: Annotated[Path, typer.Option("--profile", help="engine bundle (.tgz) with the measured profile, or a "
                                                            "trtexec --exportProfile JSON")],
    onnx: Annotated[Path, typer.Option("--onnx", help="the ONNX the bundle was compiled from")],
    fx_nodes: Annotated[Path, typer.Option("--fx-nodes", help="fx_nodes.json written by prepare")],
    model: Annotated[Optional[Path], typer.Option("--model", help="model.py (named in the emitted script)")] = None,
    emit_prepare: Annotated[Optional[Path], typer.Option(
        "--emit-prepare", help="write a runnable prepare script")] = None,
    prepare_out: Annotated[Optional[Path], typer.Option(
        "--prepare-out", help="prepare output directory the emitted script writes to (default: gaia/ beside the "
                              "base prepare directory; a carved directory is re-carved in place)")] = None,
    plugin: Annotated[Optional[list[str]], typer.Option(
        "--plugin", help="attribute onto this carve (repeatable)")] = None,
    plugins: Annotated[Optional[Path], typer.Option(
        "--plugins", help="plugins.json (default: beside the ONNX)")] = None,
    layer_info: Annotated[Optional[Path], typer.Option(
        "--layer-info", help="trtexec --exportLayerInfo JSON, for a raw --profile (bundles carry their own)")] = None,
    arch: Annotated[Optional[str], typer.Option(
        "-a", "--arch", help="target arch spec for the roofline when the profile carries none "
                             "(raw trtexec files)")] = None,
    precision: Annotated[Optional[str], typer.Option(
        "-p", "--precision", help="engine precision for a raw profile: fp16 (default) or fp32")] = None,
    merge_shape_families: Annotated[bool, typer.Option("--merge-shape-families",
                                                       help="one dynamic candidate per op")] = False,
    min_ms: Annotated[str, typer.Option("--min-ms", help="families under this total are not worth a kernel: "
                                        "milliseconds (1.0, 1ms) or a share of the profile's total (5%)")] = "1%",
    family_min_ms: Annotated[Optional[float], typer.Option(
        "--family-min-ms", help="a shape family under this folds into its op's dynamic remainder "
                                "(default: 2 x --min-ms)")] = None,
    roofline: Annotated[float, typer.Option(
        "--roofline", help="a family measured at this fraction of its roofline bound or better is "
                           "'at roofline'")] = 0.5,
    launch_ms: Annotated[float, typer.Option(
        "--launch-ms", help="kernel-launch cost per site counted in the roofline bound (ms)")] = 0.002,
    namespace: Annotated[str, typer.Option("--namespace", help="plugin namespace of the proposed selectors")] = "yasp",
    verbose: Annotated[bool, typer.Option("--verbose", help="torch-class table and per-proposal detail")] = False,
    top: Annotated[int, typer.Option("--top", help="rows to show per table (what is shown only: --emit-prepare "
                                                   "carves every proposal; choose regions with --min-ms or "
                                                   "--plugin)")] = 20,
    depth: Annotated[int, typer.Option("--depth", help="module-path depth of the --verbose module table")] = 3,
    kernelgen: KernelgenOpt = None,
    no_kernelgen_check: Annotated[bool, typer.Option(
        "--no-kernelgen-check", help="do not ask the kernel generator whether it would take each proposal")] = False,
    json_: JsonOpt = False,
) -> None:
    """Attribute every measured millisecond to a torch module and say what to plug."""
    from ..propose import ProposeOptions, propose as run_propose
    from ..propose.emit import write_script
    from ..propose.report import render
    from rich.text import Text

    from ..runtime import emit_json, stderr, stdout

    if precision not in (None, "fp16", "fp32"):
        raise UsageError(f"--precision must be fp16 or fp32, not {precision!r}")
    if model is not None:  # the emitted script runs prepare on it: refuse now what prepare would refuse then
        from ..frontend.loader import check_model_path

        check_model_path(model)
    from ..thresholds import Threshold

    min_t = Threshold.parse(min_ms, "--min-ms")
    if arch == "auto":
        from ..stages.inputs import parse_arch

        arch = parse_arch(arch).spec
    for flag, v in (("--family-min-ms", family_min_ms),):
        if v is not None and v < 0:
            raise UsageError(f"{flag} must be zero or more, not {v}")
    if launch_ms < 0:
        raise UsageError(f"--launch-ms must be zero or more, not {launch_ms}")
    if not 0 < roofline <= 1:
        raise UsageError(f"--roofline is a fraction of the roofline bound in (0, 1], not {roofline}")
    if top < 1 or depth < 0:
        raise UsageError("--top must be at least 1 and --depth zero or more")
    from ..frontend.selectors import NAMESPACE_RE

    if not NAMESPACE_RE.fullmatch(namespace):
        raise UsageError(f"--namespace {namespace!r}: letters, digits and _ only (a plugin's namespace, as in "
                         "yasp::Name), or '' for the empty one")
    opts = ProposeOptions(min_ms=min_t.value if not min_t.relative else 1.0,
                          min_pct=min_t.value if min_t.relative else None, family_min_ms=family_min_ms,
                          merge_shape_families=merge_shape_families, roofline_fraction=roofline, launch_ms=launch_ms,
                          plugins=list(plugin or []), namespace=namespace, arch=arch,
                          precision=precision,  # type: ignore[arg-type]
                          kernelgen=None if no_kernelgen_check else (kernelgen or "auto"))
    report = run_propose(profile, onnx, fx_nodes, plugins, opts, layer_info=layer_info, depth=depth)
    from ..propose.emit import NothingToCarve

    script = None
    if emit_prepare is not None:
        try:
            script = write_script(report, emit_prepare, onnx=onnx, model=model, out_dir=prepare_out)
        except NothingToCarve as e:  # "nothing to plug" is an answer, not bad input: the report still prints
            report.warnings.append(str(e))
    for w in report.warnings:
        # Warnings quote layer names such as "(Unnamed Layer* 3) [Shuffle]": never read them as markup.
        stderr.print(Text.assemble(("warning: ", "yellow"), w), highlight=False)
    if json_:
        emit_json(report)
    else:
        render(report, stdout, verbose=verbose, top=top)
    if script is not None:
        stderr.print(f"wrote {script} (run it to carve these regions: step 3)", highlight=False)

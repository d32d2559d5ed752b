"""`ytk embedded prepare`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .embedded import app
from .options import JsonOpt


@app.command("prepare")
def prepare(
    model: Annotated[Path, typer.Argument(help="model.py with a Model class and get_fwd_args()")],
    onnx_out: Annotated[Path, typer.Option("--onnx-out", help="where to write the ONNX")],
    npz_out: Annotated[Path, typer.Option("--npz-out", help="inputs, keyed by ONNX input name")],
    reference_out: Annotated[Path, typer.Option("--reference-out", help="torch outputs, keyed by ONNX output name")],
    plugin: Annotated[Optional[list[str]], typer.Option(
        "--plugin", help="carve a region: '<ns>::<PluginName>=<OpsName>[:around][@modifier...]' (repeatable)")] = None,
    debug_taps: Annotated[bool, typer.Option(
        "--debug-taps", help="make every plugin boundary (each custom-op node's inputs and outputs) a graph output "
                             "and keep the fp32 torch reference there; verify then names the region that "
                             "drifts")] = False,
    json_: JsonOpt = False,
) -> None:
    """Trace model.py, export ONNX + inputs + reference outputs + fx_nodes.json; with --plugin, carve regions."""
    from ..stages.prepare import run_prepare

    run_prepare(model, onnx_out, npz_out, reference_out, plugin or [], json_, debug_taps)

"""``ytk embedded``: the Kronos steps of the flow (prepare, propose, compile, build-plugin, verify)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import NotImplementedYet
from .options import ArchOpt, BuilderOpt, EngineOpt, JsonOpt, PrecisionOpt

app = typer.Typer(no_args_is_help=True)


def _later(cmd: str, issue: int, what: str) -> NotImplementedYet:
    return NotImplementedYet(f"`ytk {cmd}` is not implemented yet ({what} lands with issue #{issue}); "
                             "nothing was run and no file was written.")


@app.command("prepare")
def prepare(
    model: Annotated[Path, typer.Argument(help="model.py with a Model class and get_fwd_args()")],
    onnx_out: Annotated[Path, typer.Option("--onnx-out", help="where to write the ONNX")],
    npz_out: Annotated[Path, typer.Option("--npz-out", help="inputs, keyed by ONNX input name")],
    reference_out: Annotated[Path, typer.Option("--reference-out", help="torch outputs, keyed by ONNX output name")],
    plugin: Annotated[Optional[list[str]], typer.Option(
        "--plugin", help="carve a region: '<ns>::<PluginName>=<OpsName>[:around][@modifier...]' (repeatable)")] = None,
    json_: JsonOpt = False,
) -> None:
    """Trace model.py, export ONNX + inputs + reference outputs + fx_nodes.json; with --plugin, carve."""
    from ..stages.prepare import run_prepare

    run_prepare(model, onnx_out, npz_out, reference_out, plugin or [], json_)


@app.command("propose")
def propose(
    profile: Annotated[Path, typer.Option("--profile", help="engine bundle (.tgz) with the measured profile")],
    onnx: Annotated[Path, typer.Option("--onnx", help="the ONNX the bundle was compiled from")],
    fx_nodes: Annotated[Path, typer.Option("--fx-nodes", help="fx_nodes.json written by prepare")],
    model: Annotated[Optional[Path], typer.Option("--model", help="model.py (named in the emitted script)")] = None,
    emit_prepare: Annotated[Optional[Path], typer.Option("--emit-prepare", help="write a runnable prepare script")] = None,
    plugin: Annotated[Optional[list[str]], typer.Option("--plugin", help="attribute onto this carve (repeatable)")] = None,
    plugins: Annotated[Optional[Path], typer.Option("--plugins", help="plugins.json (default: beside the ONNX)")] = None,
    merge_shape_families: Annotated[bool, typer.Option("--merge-shape-families",
                                                       help="one dynamic candidate per op")] = False,
    min_ms: Annotated[float, typer.Option("--min-ms", help="families under this total are not worth a kernel")] = 1.0,
    verbose: Annotated[bool, typer.Option("--verbose", help="torch-class table and per-proposal detail")] = False,
    top: Annotated[int, typer.Option("--top", help="rows to show per table")] = 20,
    depth: Annotated[int, typer.Option("--depth", help="module-path depth of the class table")] = 3,
    json_: JsonOpt = False,
) -> None:
    """Attribute every measured millisecond to a torch module and say what to plug."""
    raise _later("embedded propose", 6, "attribution and proposals")


@app.command("compile")
def compile_(
    arch: ArchOpt,
    onnx: Annotated[Path, typer.Option("--onnx", help="ONNX from prepare")],
    npz: Annotated[Path, typer.Option("--npz", help="inputs from prepare")],
    output: Annotated[Path, typer.Option("-o", "--output", help="engine bundle to write (.tgz)")],
    precision: PrecisionOpt = "fp16",
    custom_plugin: Annotated[Optional[list[Path]], typer.Option("--custom-plugin", help="plugin .so (repeatable)")] = None,
    iterations: Annotated[int, typer.Option("--iterations", help="benchmark iterations")] = 10,
    engine: EngineOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Build an engine on the target, profile it, and write the engine bundle."""
    from ..runtime import runtime

    runtime().select("engine", engine)
    raise _later("embedded compile", 5, "engine compile and bundles")


@app.command("build-plugin")
def build_plugin(
    arch: ArchOpt,
    plugin_name: Annotated[str, typer.Option("--plugin-name", help="name the plugin must report (= the ONNX op)")],
    source: Annotated[Path, typer.Option("-s", "--source", help="<Name>.module_source.py")],
    output: Annotated[Path, typer.Option("-o", "--output", help="plugin .so to write")],
    builder: BuilderOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Build a kernel source bundle into a plugin .so for the arch spec."""
    from ..runtime import runtime

    runtime().select("builder", builder)
    raise _later("embedded build-plugin", 5, "plugin building")


@app.command("verify")
def verify(
    reference: Annotated[Path, typer.Argument(help="model.reference.npz from prepare")],
    bundles: Annotated[list[Path], typer.Argument(help="engine bundles to compare")],
    host_iterations: Annotated[int, typer.Option("--host-iterations", help="iterations of the torch host row")] = 20,
    no_host: Annotated[bool, typer.Option("--no-host", help="skip timing torch on this machine")] = False,
    json_: JsonOpt = False,
) -> None:
    """Benchmark table across bundles and numerics against the torch reference."""
    raise _later("embedded verify", 5, "verify")

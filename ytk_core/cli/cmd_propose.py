"""`ytk embedded propose`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import NotImplementedYet
from .embedded import app
from .options import JsonOpt


def _later(cmd: str, issue: int, what: str) -> NotImplementedYet:
    return NotImplementedYet(f"`ytk {cmd}` is not implemented yet ({what} lands with issue #{issue}); "
                             "nothing was run and no file was written.")


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

"""`ytk embedded compile`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import NotImplementedYet
from .embedded import app
from .options import ArchOpt, EngineOpt, JsonOpt, PrecisionOpt


def _later(cmd: str, issue: int, what: str) -> NotImplementedYet:
    return NotImplementedYet(f"`ytk {cmd}` is not implemented yet ({what} lands with issue #{issue}); "
                             "nothing was run and no file was written.")


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

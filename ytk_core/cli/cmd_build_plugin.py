"""`ytk embedded build-plugin`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import NotImplementedYet
from .embedded import app
from .options import ArchOpt, BuilderOpt, JsonOpt


def _later(cmd: str, issue: int, what: str) -> NotImplementedYet:
    return NotImplementedYet(f"`ytk {cmd}` is not implemented yet ({what} lands with issue #{issue}); "
                             "nothing was run and no file was written.")


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

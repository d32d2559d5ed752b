"""`ytk embedded verify`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import NotImplementedYet
from .embedded import app
from .options import JsonOpt


def _later(cmd: str, issue: int, what: str) -> NotImplementedYet:
    return NotImplementedYet(f"`ytk {cmd}` is not implemented yet ({what} lands with issue #{issue}); "
                             "nothing was run and no file was written.")


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

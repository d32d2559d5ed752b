"""``ytk kernelgen``: kernel generation (export, compile, get)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import NotImplementedYet
from .options import JsonOpt, KernelgenOpt

app = typer.Typer(no_args_is_help=True)


@app.command("export")
def export(
    model: Annotated[Path, typer.Argument(help="model.py with a Model class and get_fwd_args()")],
    output: Annotated[Path, typer.Option("-o", "--output", help=".pt2 to write")],
) -> None:
    """Export a model.py as a torch.export program (.pt2) for a standalone kernel."""
    raise NotImplementedYet("`ytk kernelgen export` lands with issue #5; nothing was run.")


@app.command("compile")
def compile_(
    reference: Annotated[Path, typer.Option("-r", "--reference", help="region .pt2 from prepare --plugin")],
    gpu: Annotated[str, typer.Option("-g", "--gpu", help="eval worker GPU (match the target's arch)")],
    output: Annotated[Path, typer.Option("-o", "--output", help="<Name>.module_source.py to write")],
    config: Annotated[Optional[list[str]], typer.Option("--config", help="key=value (repeatable); "
                                                        "deployment_target=tensorrt is required")] = None,
    kernelgen: KernelgenOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Generate a kernel for a carved region."""
    raise NotImplementedYet("`ytk kernelgen compile` lands with issue #5; nothing was run.")


@app.command("get")
def get(
    job: Annotated[str, typer.Argument(help="job id printed by kernelgen compile")],
    output: Annotated[Path, typer.Option("-o", "--output", help="where to write the source bundle")],
    kernelgen: KernelgenOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Fetch a finished kernel generation job's result."""
    raise NotImplementedYet("`ytk kernelgen get` lands with issue #5; nothing was run.")

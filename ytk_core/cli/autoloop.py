"""``ytk autoloop``: propose -> plug, unattended, until no gain remains."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import NotImplementedYet
from .app import app
from .options import ArchOpt, BuilderOpt, EngineOpt, JsonOpt, KernelgenOpt, PrecisionOpt


@app.command("autoloop")
def autoloop(
    model: Annotated[Path, typer.Argument(help="model.py with a Model class and get_fwd_args()")],
    arch: ArchOpt,
    workdir: Annotated[Path, typer.Option("--workdir", help="where every round's artifacts and the state live")],
    precision: PrecisionOpt = "fp16",
    engine: EngineOpt = None,
    kernelgen: KernelgenOpt = None,
    builder: BuilderOpt = None,
    max_rounds: Annotated[int, typer.Option("--max-rounds")] = 4,
    min_gain_ms: Annotated[float, typer.Option("--min-gain-ms")] = 0.5,
    max_jobs: Annotated[int, typer.Option("--max-jobs", help="kernel generation jobs in flight")] = 4,
    time_budget: Annotated[Optional[str], typer.Option("--time-budget", help="e.g. 45m, 2h")] = None,
    json_: JsonOpt = False,
) -> None:
    """Prepare, compile the baseline, then propose -> carve -> generate -> build -> compile -> verify."""
    raise NotImplementedYet("`ytk autoloop` is not implemented yet (it lands with issue #9, after the stages "
                            "it chains); nothing was run.")

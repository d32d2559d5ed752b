"""Options shared by several commands (typer Annotated aliases)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

EngineOpt = Annotated[Optional[str], typer.Option("--engine", help="engine backend (compile + profile); "
                                                  "overrides $YTK_ENGINE and ytk.toml", show_default=False)]
KernelgenOpt = Annotated[Optional[str], typer.Option("--kernelgen", help="kernel generation backend; "
                                                     "overrides $YTK_KERNELGEN and ytk.toml", show_default=False)]
BuilderOpt = Annotated[Optional[str], typer.Option("--builder", help="plugin builder backend; "
                                                   "overrides $YTK_BUILDER and ytk.toml", show_default=False)]
WorkerOpt = Annotated[Optional[str], typer.Option("--worker", help="a Kronos worker's URL (`ytk worker kronos` on the "
                                                  "target): the engine is built and profiled there; overrides "
                                                  "[workers] kronos in ytk.toml ('local': compile here)",
                                                  show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="print the report as JSON on stdout")]
ArchOpt = Annotated[str, typer.Option("-a", "--arch", help="target arch spec, e.g. arm64-sm87-dos6010-cu114-trt86, "
                                                          "or 'auto' (the local GPU, else that Orin)")]
PrecisionOpt = Annotated[str, typer.Option("-p", "--precision", help="engine precision: fp16 or fp32")]
ExistingFile = Annotated[Path, typer.Argument(exists=False, dir_okay=False)]

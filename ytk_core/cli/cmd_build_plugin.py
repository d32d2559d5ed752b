"""`ytk embedded build-plugin`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .embedded import app
from .options import ArchOpt, BuilderOpt, JsonOpt


@app.command("build-plugin")
def build_plugin(
    arch: ArchOpt,
    plugin_name: Annotated[str, typer.Option("--plugin-name", help="name the plugin must report (= the ONNX op)")],
    source: Annotated[Path, typer.Option("-s", "--source", help="<Name>.module_source.py")],
    output: Annotated[Path, typer.Option("-o", "--output", help="plugin .so to write")],
    candidates: Annotated[Optional[Path], typer.Option(
        "--candidates", help="candidates.json of the prepare dir: also check the source against its region")] = None,
    precision: Annotated[Optional[str], typer.Option(
        "-p", "--precision", help="engine precision the plugin is for (fp16/fp32): checks its dtypes")] = None,
    builder: BuilderOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Build a kernel source bundle into a plugin .so for the arch spec.

    --plugin-name rewrites the name in a copy of the source (the generated file is never
    modified); the built .so's self-description is checked before the --custom-plugin line is printed.
    """
    from ..runtime import emit_json, stdout
    from ..stages.build_plugin import run_build_plugin

    out = run_build_plugin(arch, plugin_name, source, output, builder, candidates, precision)
    d = out.description
    if json_:
        emit_json({"so_path": str(out.so_path), "sha256": out.sha256, "description": d.model_dump(mode="json"),
                   "builder_selection": out.builder_selection, "renamed_from": out.renamed_from,
                   "contract": out.contract.as_dict(), "custom_plugin": out.custom_plugin_line})
        return
    note = f" (renamed from {out.renamed_from} in a copy; {source} is unchanged)" if out.renamed_from else ""
    stdout.print(f"built {out.so_path}: {d.namespace}::{d.name} v{d.version}{note}", highlight=False, markup=False)
    stdout.print(f"  {d.num_inputs} inputs ({', '.join(f'{t}/{f}' for t, f in zip(d.input_dtypes, d.input_formats))})"
                 f" -> {d.num_outputs} output(s); sm{d.sm} {d.cpu_arch}, engine_api {d.engine_api}, "
                 f"builder {d.builder}", highlight=False, markup=False)
    if d.engine_api == "mock-cpu":
        stdout.print("  SIMULATED: a mock plugin (no GPU code); only the mock engine accepts it", highlight=False,
                     markup=False)
    stdout.print(out.custom_plugin_line, highlight=False, markup=False)

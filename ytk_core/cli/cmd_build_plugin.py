"""`ytk embedded build-plugin`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .embedded import app
from .options import ArchOpt, BuilderOpt, EngineOpt, JsonOpt


@app.command("build-plugin")
def build_plugin(
    arch: ArchOpt,
    plugin_name: Annotated[str, typer.Option("--plugin-name", help="name the plugin must report (= the ONNX op)")],
    source: Annotated[Path, typer.Option("-s", "--source", help="<Name>.module_source.py")],
    output: Annotated[Path, typer.Option("-o", "--output", help="plugin .so to write")],
    candidates: Annotated[Optional[Path], typer.Option(
        "--candidates", help="candidates.json of the prepare dir: check the source against its region, and run "
        "the built .so through the admission gate against the region's reference (on a GPU of its SM)")] = None,
    precision: Annotated[Optional[str], typer.Option(
        "-p", "--precision", help="engine precision the plugin is for (fp16/fp32): checks its dtypes")] = None,
    builder: BuilderOpt = None,
    engine: EngineOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Build a kernel source bundle into a plugin .so for the arch spec.

    --plugin-name rewrites the name in a copy of the source (the generated file is never
    modified); the built .so's self-description is checked before the --custom-plugin line is printed.
    With --candidates, the .so itself is run on the GPU against the region's reference (the admission
    gate); its verdict goes to <output>.admission.json, and a rejected plugin exits 5. The plugin is built
    for the interface the engine loads (--engine, else as compile chooses it): a TensorRT engine gets a
    TensorRT plugin (IPluginV2DynamicExt for trt8x, IPluginV3 for trt10).
    """
    from ..runtime import emit_json, stdout
    from ..stages.build_plugin import run_build_plugin

    out = run_build_plugin(arch, plugin_name, source, output, builder, candidates, precision, engine)
    d = out.description
    if json_:
        emit_json({"so_path": str(out.so_path), "sha256": out.sha256, "description": d.model_dump(mode="json"),
                   "builder_selection": out.builder_selection, "renamed_from": out.renamed_from,
                   "contract": out.contract.as_dict(), "custom_plugin": out.custom_plugin_line,
                   "admission": out.admission.model_dump(mode="json") if out.admission else None})
        return
    note = f" (renamed from {out.renamed_from} in a copy; {source} is unchanged)" if out.renamed_from else ""
    stdout.print(f"built {out.so_path}: {d.namespace}::{d.name} v{d.version}{note}", highlight=False, markup=False)
    stdout.print(f"  {d.num_inputs} inputs ({', '.join(f'{t}/{f}' for t, f in zip(d.input_dtypes, d.input_formats))})"
                 f" -> {d.num_outputs} output(s); sm{d.sm} {d.cpu_arch}, engine_api {d.engine_api}, "
                 f"builder {d.builder}", highlight=False, markup=False)
    if d.engine_api == "mock-cpu":
        stdout.print("  SIMULATED: a mock plugin (no GPU code); only the mock engine accepts it", highlight=False,
                     markup=False)
    a = out.admission
    if a is not None and d.engine_api != "mock-cpu":  # a mock plugin's line above says it all
        if a.status == "admitted":
            worst = max((c.budget_used for c in a.cases), default=0.0)
            line = (f"  admitted on {a.device}: {len(a.cases)} case(s), {a.repeats} replays each, worst error "
                    f"{worst:.3g}x of its budget")
        else:
            line = f"  {a.status}: {a.reason}"
        stdout.print(line, highlight=False, markup=False)
    stdout.print(out.custom_plugin_line, highlight=False, markup=False)

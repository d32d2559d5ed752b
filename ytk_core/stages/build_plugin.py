"""Step 5, ``ytk embedded build-plugin``: rename in a copy, check the contract, build, check the .so.

The generated source cost a kernel generation job, so it is never modified: ``--plugin-name``
rewrites the name in a temporary copy, and that copy is what the builder gets. After the build,
the .so's own self-description is read back and compared with what was asked for, so a plugin
that would not resolve its node is caught here rather than at the engine compile.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ytk_hookspecs.kernel_source import KernelSource, KernelSourceError
from ytk_hookspecs.models import (AdmissionRecord, ArchSpec, BuildRequest, BuildResult, Candidate, CandidatesFile,
                                  PluginDescription, sha256_file)
from ytk_hookspecs.plugin_info import PluginInfoError, read_plugin_description

from ytk_hookspecs.contract import ContractReport, check_meta_against_candidate, check_source, simulated_kernel
from ..errors import BackendError, UsageError, YtkError
from ..plugins.selection import select_backend
from ..runtime import runtime
from .admission import AdmissionRefused, admit
from .inputs import existing_file, output_file, parse_arch, parse_precision

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class BuildOutcome:
    so_path: Path
    sha256: str
    description: PluginDescription
    builder_selection: str
    renamed_from: str | None
    contract: ContractReport
    admission: AdmissionRecord | None = None
    log: str = ""
    warnings: list[str] = field(default_factory=list)

    @property
    def custom_plugin_line(self) -> str:
        return f"--custom-plugin {self.so_path}"


def load_source(path: Path) -> KernelSource:
    existing_file(path, "-s/--source", "Pass the <Name>.module_source.py written by `ytk kernelgen compile`.")
    try:
        return KernelSource.read(path)
    except KernelSourceError as e:
        raise UsageError(str(e)) from None


def find_region(candidates: Path, name: str) -> Candidate:
    """The region ``name`` of a prepare's candidates.json, or a usage error naming what it has."""
    existing_file(candidates, "--candidates")
    cf = CandidatesFile.read(candidates)
    cand = next((c for c in cf.candidates if c.name == name), None)
    if cand is None:
        raise UsageError(f"--candidates {candidates} has no region named {name!r} (it has "
                         f"{', '.join(c.name for c in cf.candidates) or 'none'}); --plugin-name must be the "
                         "name the prepare --plugin selector put into the ONNX")
    return cand


def contract_of(src: KernelSource, origin: str, candidates: Path | None, precision: str | None) -> ContractReport:
    """Intrinsic checks, plus the region's contract when its candidates.json is given."""
    rep = check_source(src, origin)
    if candidates is not None:
        cand = find_region(candidates, src.meta.plugin_name)
        rep.extend(check_meta_against_candidate(src.meta, cand, precision or "fp16"))
    elif precision is not None:
        want = "float16" if precision == "fp16" else "float32"
        for i, t in enumerate(src.meta.inputs):
            if t.role == "activation" and t.dtype != want:
                rep.error(f"precision: input {i} ({t.name}) is {t.dtype} but a {precision} engine feeds {want}")
        for i, t in enumerate(src.meta.outputs):
            if t.dtype != want:
                rep.error(f"precision: output {i} ({t.name}) is {t.dtype} but a {precision} engine expects {want}")
    return rep


def engine_api_for(engine: str | None, target: ArchSpec) -> str | None:
    """The plugin interface the engine that will load the plugin asks for, or None for the builder's default.

    An engine that loads one interface only says so with ``plugin_engine_api(arch)`` (the ``tensorrt`` engine:
    IPluginV2DynamicExt for TensorRT 8.6, IPluginV3 from 10); the engine is the one ``compile`` would
    choose (``engine``, else $YTK_ENGINE, ytk.toml or the automatic choice), need it run here or not.
    """
    rt = runtime()
    try:
        sel = select_backend(rt.manager, "engine", engine, rt.config, target, need_available=False)
    except BackendError:
        return None  # no engine can run here: the builder's default, as before (an unknown name is still an error)
    ask = getattr(sel.backend.impl, "plugin_engine_api", None)
    return str(ask(target)) if callable(ask) else None


def run_build_plugin(arch: str, plugin_name: str, source: Path, output: Path, builder: str | None = None,
                     candidates: Path | None = None, precision: str | None = None,
                     engine: str | None = None) -> BuildOutcome:
    """Build ``source`` into ``output`` reporting ``plugin_name``; returns the verified description.

    The plugin is built for the interface ``engine`` loads (:func:`engine_api_for`)."""
    rt = runtime()
    target = parse_arch(arch)
    prec = parse_precision(precision) if precision else None
    if not _NAME.match(plugin_name):
        raise UsageError(f"--plugin-name {plugin_name!r} is not a valid plugin name (letters, digits and _, not "
                         "starting with a digit); it must equal the <PluginName> of the prepare --plugin selector")
    source = Path(source)
    src = load_source(source)
    renamed_from = src.meta.plugin_name if src.meta.plugin_name != plugin_name else None
    copy = src.renamed(plugin_name)
    rep = contract_of(copy, str(source), candidates, prec)
    if not rep.ok:
        raise YtkError(f"{source} breaks the plugin contract, so it was not built:\n  - " + "\n  - ".join(rep.errors))
    for w in rep.warnings:
        rt.warn_once(w)
    sel = rt.select("builder", builder, target)
    placeholder = simulated_kernel(copy.meta)
    if placeholder and not sel.backend.info.simulated:
        raise UsageError(f"{source} is a simulator's placeholder, not a kernel ({placeholder}): the {sel.name} "
                         "builder would make a .so that computes nothing. Build it with a simulated builder "
                         "(--builder mock) for the simulated engine, or generate a real kernel (e.g. --kernelgen "
                         "templates on a CUDA machine)")
    output = output_file(output, "-o/--output")
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ytk-build-plugin-") as td:
        staged = copy.write(Path(td) / f"{plugin_name}.module_source.py")
        req = BuildRequest(source=staged, plugin_name=plugin_name, arch=target.spec, output=output.resolve(),
                           engine_api=engine_api_for(engine, target))  # type: ignore[arg-type]
        res = sel.backend.impl.build_plugin(req, rt.context(sel, "build_plugin", Path(td)))
    if not isinstance(res, BuildResult):
        raise BackendError(f"builder {sel.name!r} returned {type(res).__name__}, not a BuildResult")
    so = Path(res.so_path)
    problems = _verify_built(so, copy, target.sm)
    if problems:
        bad = so.with_name(so.name + ".rejected")
        if so.exists():
            shutil.move(str(so), bad)
        raise BackendError(f"builder {sel.name!r} produced {so}, but its self-description does not match the "
                           f"source (kept as {bad} for inspection):\n  - " + "\n  - ".join(problems))
    desc = read_plugin_description(so)
    cand = find_region(candidates, plugin_name) if candidates is not None else None
    with rt.context(None, "admission").progress(f"admission of {plugin_name}") as task:
        rec = admit(so, cand, Path(candidates).parent if candidates is not None else None, prec or "fp16",
                    progress=lambda msg: task.update(description=msg))
    if rec.status == "rejected":
        bad = so.with_name(so.name + ".rejected")
        shutil.move(str(so), bad)
        rec_path = AdmissionRecord.path_for(so)
        kept = AdmissionRecord.path_for(bad)
        shutil.move(str(rec_path), kept)
        raise AdmissionRefused(f"plugin {plugin_name} was built but the admission gate rejected it, so it will not "
                               f"reach an engine (kept as {bad}; every case in {kept}):\n  - "
                               + "\n  - ".join(p for c in rec.cases for p in c.problems)[:4000])
    return BuildOutcome(so_path=so, sha256=sha256_file(so), description=desc, builder_selection=sel.describe(),
                        renamed_from=renamed_from, contract=rep, admission=rec, log=res.log,
                        warnings=rep.warnings)


def _verify_built(so: Path, src: KernelSource, sm: int) -> list[str]:
    """Read the built .so back (any CPU architecture) and compare it with the contract it was built from."""
    if not so.is_file():
        return [f"{so} was not written"]
    try:
        d = read_plugin_description(so)
    except PluginInfoError as e:
        return [str(e)]
    m = src.meta
    want = {"name": m.plugin_name, "namespace": m.plugin_namespace, "version": m.plugin_version,
            "num_inputs": len(m.inputs), "num_outputs": len(m.outputs), "launcher": m.launcher,
            "input_dtypes": [t.dtype for t in m.inputs], "output_dtypes": [t.dtype for t in m.outputs],
            "sm": sm}
    return [f"{k}: the .so reports {getattr(d, k)!r}, the source declares {v!r}"
            for k, v in want.items() if getattr(d, k) != v]

"""Step 4, ``ytk kernelgen``: generate a kernel for a carved region (compile), fetch it (get), and
export a model.py for a standalone kernel (export).

``compile`` refuses to start without ``deployment_target=tensorrt`` (a kernel generated for a torch
extension cannot become an engine plugin, and a job is not cheap), passes the region's
``candidates.json`` entry to the generator, and checks what comes back against that region before
anyone spends a build on it.
"""

from __future__ import annotations

import difflib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ytk_hookspecs.models.base import replace_file
from ytk_hookspecs.kernel_source import KernelSource, KernelSourceError
from ytk_hookspecs.models import (CORE_CONFIG_KEYS, ArchSpec, Candidate, KernelGenRequest,
                                  KernelGenResult, KernelReport, Reoptimization, SupportAnswer, SupportRequest)
from ytk_hookspecs.models.base import ArtifactError, file_mode

from ytk_hookspecs.contract import (ContractReport, check_meta_against_candidate, check_report_against_candidate,
                                    check_source)
from ..errors import BackendError, KernelJobFailed, UsageError, YtkError
from ..runtime import runtime
from .inputs import existing_file, output_file, parse_arch, parse_config, parse_precision

DEPLOYMENT_TARGET_REQUIRED = (
    "kernelgen compile needs --config deployment_target=tensorrt. It tells the generator the kernel is destined "
    "for a TensorRT plugin rather than a standalone torch extension, which is what makes the emitted bundle "
    "something build-plugin can turn into a .so. Without it the job would produce a kernel you cannot plug in, "
    "and generation is not cheap, so nothing was started.")


def cache_dir() -> Path:
    """Where kernel generation jobs keep their state between ``compile`` and ``get``."""
    env = os.environ.get("YTK_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ytk"


@dataclass
class KernelgenOutcome:
    result: KernelGenResult
    selection: str
    candidate: str | None
    contract: ContractReport | None = None
    report: KernelReport | None = None
    warnings: list[str] = field(default_factory=list)
    generator: str = ""  # the generator of the chain that produced the kernel
    tried: list[str] = field(default_factory=list)  # the generators before it, and why they gave none

    def as_dict(self) -> dict[str, object]:
        return {"job_id": self.result.job_id, "status": self.result.status,
                "source": str(self.result.source) if self.result.source else None,
                "report": str(self.result.report) if self.result.report else None,
                "message": self.result.message, "kernelgen_selection": self.selection, "candidate": self.candidate,
                "contract": self.contract.as_dict() if self.contract else None,
                "kernel_report": self.report.model_dump(mode="json") if self.report else None,
                "warnings": self.warnings, "generator": self.generator, "tried": self.tried}


def find_candidate(reference: Path, candidates: Path | None) -> tuple[Candidate | None, Path | None]:
    """The region a ``.pt2`` was carved from (:func:`ytk_hookspecs.candidates.find_candidate`); a bad
    ``--candidates`` file is a usage error."""
    from ytk_hookspecs.candidates import find_candidate as find

    if candidates is not None and not Path(candidates).is_file():
        raise UsageError(f"--candidates {candidates} does not exist")
    try:
        return find(reference, candidates_file=candidates)
    except ArtifactError as e:
        raise UsageError(str(e)) from None


def _region_file(reference: Path) -> Path:
    """``-r``: an existing region ``.pt2`` (a torch.export archive), refused before any job otherwise."""
    import zipfile

    hint = "Pass a plugin_candidates/<Name>.pt2 written by `ytk embedded prepare --plugin`."
    reference = existing_file(reference, "-r/--reference", hint)
    if not zipfile.is_zipfile(reference):
        raise UsageError(f"-r/--reference {reference} is not a .pt2 (a torch.export archive). {hint}")
    try:
        with zipfile.ZipFile(reference) as z:
            names = z.namelist()
    except (zipfile.BadZipFile, OSError) as e:
        raise UsageError(f"-r/--reference {reference} cannot be read as a zip archive ({e}). {hint}") from None
    # a torch.export archive names its format; a .npz (arrays) or a torch.save .pt is a zip too
    if not any(n.rsplit("/", 1)[-1] == "archive_format" or n.endswith("/models/model.json") for n in names):
        kind = ("a NumPy .npz" if names and all(n.endswith(".npy") for n in names) else
                "a torch.save file" if any(n.endswith("/data.pkl") for n in names) else "another zip archive")
        raise UsageError(f"-r/--reference {reference} is {kind}, not a .pt2 (a torch.export archive). {hint}")
    return reference


def check_gpu(gpu: str, target: ArchSpec | None) -> None:
    """``-g`` names a GPU ytk knows (or this machine's own), of the target's SM when ``-a`` is given."""
    from ytk_hookspecs.models import GPU_NAMES, gpu_sm

    sm = gpu_sm(gpu)
    if sm is None:
        from ..target import local_gpu_name

        local = local_gpu_name()
        if local and gpu.lower() == local.lower():
            return
        raise UsageError(f"-g/--gpu {gpu!r} is no GPU ytk knows; known: {', '.join(sorted(GPU_NAMES))}"
                         + (f", or this machine's {local!r}" if local else ""))
    if target is not None and sm != target.sm:
        raise UsageError(f"-g/--gpu {gpu!r} is an sm_{sm} GPU but -a {target.spec} is sm_{target.sm}: a kernel is "
                         "scored on the GPU it will run on")


def core_settings(cfg: dict[str, str]) -> tuple[dict[str, str], Reoptimization | None]:
    """``--config`` as the user gave it, split: the generator's own keys, and what the core reads itself
    (:data:`~ytk_hookspecs.models.CORE_CONFIG_KEYS`) turned into the request's typed fields. Refuses a
    missing or wrong ``deployment_target`` (nothing is started) and an incomplete re-optimisation."""
    if cfg.get("deployment_target") != "tensorrt":
        got = cfg.get("deployment_target")
        near = difflib.get_close_matches("deployment_target", [k for k in cfg if k != "deployment_target"], n=1)
        hint = f" (got deployment_target={got})" if got else \
            f" (--config {near[0]}={cfg[near[0]]}: did you mean deployment_target?)" if near else ""
        raise UsageError(DEPLOYMENT_TARGET_REQUIRED + hint)
    own = {k: v for k, v in cfg.items() if k not in CORE_CONFIG_KEYS}
    flag = cfg.get("reoptimize", "0")
    if flag not in ("0", "1"):
        raise UsageError(f"--config reoptimize={flag}: use 1 (the region is plugged already; fail unless the new "
                         "kernel beats ms_to_beat) or 0")
    bars = {k: cfg[k] for k in ("ms_to_beat", "kernel_ms_to_beat") if k in cfg}
    if flag == "0":
        if bars:
            raise UsageError(f"--config {', '.join(bars)}: only meaningful with --config reoptimize=1")
        return own, None
    if "ms_to_beat" not in bars:
        raise UsageError("--config reoptimize=1 needs --config ms_to_beat=MS (the region's engine time per site "
                         "that the new kernel must beat)")
    try:
        return own, Reoptimization(**{k: float(v) for k, v in bars.items()})
    except ValueError:
        raise UsageError(f"--config {' '.join(f'{k}={v}' for k, v in bars.items())}: expected times in ms "
                         "above 0") from None


def check_config_keys(cfg: dict[str, str], sel: Any) -> None:
    """Every ``--config`` key is one the core or a selected generator reads (a typo would otherwise be
    silently ignored, and the job run without the setting the user asked for). ``sel``: one selection or
    a chain (a key any of them reads is known; each gets only its own)."""
    from ytk_hookspecs.models import CORE_CONFIG_KEYS, FORWARDED_CONFIG_KEYS

    chain = sel if isinstance(sel, list) else [sel]
    if any(FORWARDED_CONFIG_KEYS in s.backend.info.config_keys for s in chain):
        return  # a generator that forwards jobs (gaia) checks them against the one that runs them, before sending
    known = dict(CORE_CONFIG_KEYS)
    for s in chain:
        known.update(s.backend.info.config_keys)
    unknown = sorted(k for k in cfg if k not in known)
    if unknown:
        listing = "; ".join(f"{k} ({v})" for k, v in sorted(known.items()))
        names = ", ".join(repr(s.name) for s in chain)
        raise UsageError(f"--config {', '.join(unknown)}: not a key kernel generator {names} or ytk reads. "
                         f"Known keys: {listing}")


def run_kernelgen_compile(reference: Path, gpu: str, output: Path, config: list[str] | dict[str, str] | None,
                          kernelgen: str | None = None, arch: str | None = None, precision: str = "fp16",
                          candidates: Path | None = None, reoptimize: Reoptimization | None = None) -> KernelgenOutcome:
    """Submit a kernel generation job for the region of ``reference`` and check what comes back.
    ``reoptimize`` (the autoloop's) takes the place of the ``reoptimize``/``*ms_to_beat`` config keys."""
    cfg = dict(config) if isinstance(config, dict) else parse_config(config)
    check_keys = cfg
    cfg, from_config = core_settings(cfg)
    reoptimize = reoptimize or from_config
    rt = runtime()
    prec = parse_precision(precision)
    target = parse_arch(arch) if arch else None
    check_gpu(gpu, target)
    reference = _region_file(reference)
    output_file(Path(output), "-o/--output")
    cand, prep = find_candidate(reference, candidates)
    warnings: list[str] = []
    if cand is None:
        where = reference.resolve().parent
        warnings.append(f"no candidates.json entry for {reference} (looked for candidates.json in {where.parent} and "
                        f"{where}); the result cannot be checked against an ONNX node (arity, shapes), and "
                        "a generator that works from the carved region's record (the mock) refuses it: carve the "
                        "region with `ytk embedded prepare --plugin`")
        rt.log.warning(warnings[-1])
    chain = rt.select_chain("kernelgen", kernelgen, target)
    check_config_keys(check_keys, chain)
    req = KernelGenRequest(reference=reference.resolve(), gpu=gpu, config=cfg, reoptimize=reoptimize,
                           output=Path(output).resolve(),
                           candidate=cand, prepare_dir=prep, arch=target.spec if target else None,
                           precision=prec, plugin_name=cand.name if cand else None)  # type: ignore[arg-type]
    tried: list[str] = []
    last_job = ""
    for n, sel in enumerate(chain):
        if len(chain) > 1 and cand is not None:  # a certain "no" costs no job; the next generator is asked
            from .supports import check_support

            ans = check_support(cand, prep or reference.resolve().parent.parent, None, target, prec, selection=sel)
            if not ans.supported and ans.certain:
                tried.append(f"{sel.name}: refuses the region: {' '.join(ans.why.split())}")
                continue
        own = _config_for(cfg, sel)
        try:
            out = _run_one(sel, req.model_copy(update={"config": own}), cand, reference, output, own, prec, warnings)
        except (KernelJobFailed, YtkError) as e:
            if len(chain) == 1:
                raise
            last_job = getattr(e, "job_id", last_job)
            tried.append(f"{sel.name}: {' '.join(str(e).split())}")
            if n + 1 < len(chain):
                rt.log.warning(f"{sel.name} gave no kernel; trying {chain[n + 1].name}", why=tried[-1][:300])
            continue
        out.tried = tried
        return out
    raise KernelJobFailed(last_job or "none", ",".join(s.name for s in chain),
                          "no generator of the chain gave a kernel: " + "; ".join(tried))


def _config_for(cfg: dict[str, str], sel: Any) -> dict[str, str]:
    """The ``--config`` keys one generator of a chain reads (all of them for a forwarding one)."""
    from ytk_hookspecs.models import FORWARDED_CONFIG_KEYS

    keys = sel.backend.info.config_keys
    return dict(cfg) if FORWARDED_CONFIG_KEYS in keys else {k: v for k, v in cfg.items() if k in keys}


def _run_one(sel: Any, req: KernelGenRequest, cand: Candidate | None, reference: Path, output: Path,
             cfg: dict[str, str], prec: str, warnings: list[str]) -> KernelgenOutcome:
    """One generator's job (or its cached result), checked against the region's contract."""
    from ytk_hookspecs.models import FORWARDED_CONFIG_KEYS

    from . import kernel_cache

    rt = runtime()
    key = None
    # A forwarding generator (a service) runs another generator elsewhere: its own code, which keys the cache,
    # says nothing of which one or where, so a kernel it returned is not reused here (the service has its cache).
    forwarding = FORWARDED_CONFIG_KEYS in sel.backend.info.config_keys
    # a simulated generator's results are never stored, so a hit for one could only have been planted
    if cand is not None and kernel_cache.enabled() and not forwarding and not sel.backend.info.simulated:
        key = kernel_cache.cache_key(cand, sel.name, kernel_cache.code_fingerprint(sel.backend.impl), req.gpu,
                                     req.arch, prec, cfg, baked=kernel_cache.baked_digest(reference),
                                     reoptimize=req.reoptimize)
        report = kernel_cache.lookup(cache_dir(), key, cand.name, Path(output).resolve())
        if report is not None:
            rt.log.info(f"{cand.name}: reusing a finished kernel generation job for the same region", cache_key=key)
            res = KernelGenResult(job_id=f"cache-{key}", status="done", source=Path(output).resolve(), report=report,
                                  message="reused from the kernel cache (same ops, shapes, target and generator)")
            out = KernelgenOutcome(result=res, selection=sel.describe(), candidate=cand.name, warnings=warnings,
                                   generator=sel.name)
            _check_result(out, Path(output), cand, prec)
            return out
    res = sel.backend.impl.submit(req, rt.context(sel, "kernelgen", cache_dir() / "kernelgen"))
    if not isinstance(res, KernelGenResult):
        raise BackendError(f"kernelgen backend {sel.name!r} returned {type(res).__name__}, not a KernelGenResult")
    out = KernelgenOutcome(result=res, selection=sel.describe(), candidate=cand.name if cand else None,
                           warnings=warnings, generator=sel.name)
    if res.status == "failed":
        raise KernelJobFailed(res.job_id, sel.name, res.message)
    if res.status == "done":
        _check_result(out, Path(output), cand, prec)
        if key is not None:
            why = kernel_cache.store(cache_dir(), key, Path(res.source or output),
                                     Path(res.report) if res.report else None)
            if why:
                rt.warn_once(f"{why}; the kernel is not cached for reuse")
    return out


def run_kernelgen_dry_run(reference: Path, config: list[str] | dict[str, str] | None, kernelgen: str | None = None,
                          arch: str | None = None, precision: str = "fp16",
                          candidates: Path | None = None, gpu: str | None = None) -> "SupportAnswer":
    """``kernelgen compile --dry-run``: what the selected generator would do with the region, no job. The
    arguments are checked as the job would check them (``-g`` too): a dry run that passes where the job
    refuses its command line answers the wrong question."""
    from ..stages.supports import ask

    given = dict(config) if isinstance(config, dict) else parse_config(config)
    cfg, _reoptimize = core_settings(given)
    prec = parse_precision(precision)
    target = parse_arch(arch) if arch else None
    if gpu is not None:
        check_gpu(gpu, target)
    reference = _region_file(reference)
    cand, _prep = find_candidate(reference, candidates)
    chain = runtime().select_chain("kernelgen", kernelgen, target, need_available=False)
    check_config_keys(given, chain)
    return ask(SupportRequest(candidate=cand, reference=reference.resolve(), precision=prec, config=cfg,  # type: ignore[arg-type]
                              arch=target.spec if target else None), None, target, selection=chain)


def _check_result(out: KernelgenOutcome, output: Path, cand: Candidate | None, precision: str) -> None:
    res = out.result
    src_path = Path(res.source or output)
    try:
        src = KernelSource.read(src_path)
    except KernelSourceError as e:
        raise BackendError(f"job {res.job_id} finished but its source is not a valid kernel source bundle: "
                           f"{e}") from None
    rep = check_source(src, str(src_path))
    if cand is not None:
        rep.extend(check_meta_against_candidate(src.meta, cand, precision))
    out.contract = rep
    if res.report and Path(res.report).is_file():
        try:
            out.report = KernelReport.read(res.report)
        except ArtifactError as e:
            out.warnings.append(f"report.json unreadable: {e}")
    if cand is not None and out.report is not None:
        rep.extend(check_report_against_candidate(out.report, cand))
    for w in rep.warnings:
        out.warnings.append(w)
        runtime().warn_once(w)
    if not rep.ok:
        rejected = src_path.with_name(src_path.name + ".rejected")
        shutil.move(str(src_path), rejected)
        raise YtkError(f"job {res.job_id} produced a kernel that breaks its region's contract; do not build it. "
                       f"Moved to {rejected} (kept: it cost a job):\n  - " + "\n  - ".join(rep.errors))


def run_kernelgen_get(job_id: str, output: Path, kernelgen: str | None = None) -> KernelgenOutcome:
    """Fetch a job's source bundle; checks it on its own (the region is not known here)."""
    rt = runtime()
    chain = rt.select_chain("kernelgen", kernelgen)
    res, sel = None, chain[0]
    for sel in chain:  # a job belongs to the generator that knows it
        res = sel.backend.impl.fetch(job_id, Path(output).resolve(), rt.context(sel, "kernelgen",
                                                                                 cache_dir() / "kernelgen"))
        if res is not None:
            break
    if res is None:
        names = ", ".join(repr(s.name) for s in chain)
        raise UsageError(f"kernelgen backend {names} does not know job {job_id!r}")
    out = KernelgenOutcome(result=res, selection=sel.describe(), candidate=None, generator=sel.name)
    if res.status == "failed":
        raise BackendError(f"job {job_id} failed: {res.message}")
    if res.status == "done":
        _check_result(out, Path(output), None, "fp16")
    return out


def run_kernelgen_export(model: Path, output: Path) -> Path:
    """torch.export a model.py (``Model`` + ``get_fwd_args``) to a .pt2 for a standalone kernel."""
    import tempfile

    import torch

    from ..frontend.export import export_program
    from ..frontend.loader import load_model

    rt = runtime()
    with rt.context(None, "export").progress(f"loading {model}"):
        lm = load_model(Path(model))
    with rt.context(None, "export").progress(f"torch.export {model}"):
        # prepare's export: torch's own stderr output held back, the failing module and line named, and a
        # forward that raises in plain torch too reported as the model's error
        ep = export_program(lm.model, lm.args, lm.path)
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp.pt2", dir=output.parent)  # torch wants .pt2
    os.close(fd)
    try:
        torch.export.save(ep, tmp)
        os.chmod(tmp, file_mode())
        replace_file(tmp, output)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return output

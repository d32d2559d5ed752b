"""One zoo model through the early flow, in a process of its own (``benchmarks/zoo.py`` starts one per model).

    python benchmarks/zoo_flow.py NAME --workdir DIR [--arch ARCH] [--min-ms MS] [--launch-ms MS]

prepare (trace + export) -> compile the baseline -> propose (``min_ms=0`` and ``launch_ms=0`` by default,
so that small sizes still propose) -> carve every proposal on its own -> for each carved region, the
selected kernel generator's support answer and the templates recogniser's -> carve every accepted
proposal together. It calls the
Python functions the CLI calls (``do_prepare``, ``run_compile``, ``propose``, the frontend's ``carve``). The backends
and the input size come from the environment (``YTK_ENGINE``, ``YTK_EXAMPLE_SIZE``...),
which the parent sets.

Each carve starts from a copy of the baseline's prepare directory (ONNX, inputs, fx_nodes.json) and calls
the carve hook as ``ytk embedded prepare --plugin`` does after its trace: the trace of this process is
reused (the frontend caches it by the ONNX's sha256), so N carves cost one export, not N + 1.

``DIR/result.json`` (a :class:`zoo_results.ModelRun`) is rewritten after every stage: a crash or a timeout
still leaves what was reached. Tracebacks go to stderr (the parent keeps it in ``DIR/log.txt``).
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import shutil
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "benchmarks"), str(REPO / "contrib" / "zoo")]

from zoo_registry import ZooEntry, entry  # noqa: E402
from zoo_results import NO_SUPPORTS_HOOK, CandidateRun, FamilyTime, ModelRun, Stage  # noqa: E402

from ytk_hookspecs.models.base import write_text_atomic  # noqa: E402

ARCH = "arm64-sm87-dos6010-cu114-trt86"
PRECISION = "fp16"
BASE_FILES = ("model.onnx", "model.npz", "model.reference.npz", "fx_nodes.json")


class StageFailed(Exception):
    """A stage the model cannot go past; its miss is recorded already."""


def describe(exc: BaseException) -> str:
    """The message a user would see: a YtkError's own text (and hint), else the exception's type and text.
    Anything that is not a YtkError is a bug somewhere: its traceback goes to the log."""
    from ytk_core.errors import YtkError

    if isinstance(exc, YtkError):
        return exc.render()
    traceback.print_exception(exc, file=sys.stderr)
    return f"{type(exc).__name__}: {exc}"


class Flow:
    """The stages for one model; ``run`` is what it found out so far."""

    def __init__(self, zoo: ZooEntry, workdir: Path, arch: str, min_ms: float = 0.0, launch_ms: float = 0.0,
                 stop_after: str = "carve") -> None:
        from zoo_common import input_size

        self.zoo, self.workdir, self.arch, self.stop_after = zoo, workdir, arch, stop_after
        self.min_ms, self.launch_ms = min_ms, launch_ms
        self.base = workdir / "base"
        self.run = ModelRun(name=zoo.name, source=zoo.source, family=zoo.family, depthwise=zoo.depthwise,
                            attention=zoo.attention, size="x".join(map(str, input_size(zoo))), workdir=str(workdir))
        self.t0 = time.perf_counter()

    def save(self) -> None:
        self.run.wall_s = round(time.perf_counter() - self.t0, 2)
        write_text_atomic(self.workdir / "result.json", self.run.model_dump_json(indent=2) + "\n")

    @contextlib.contextmanager
    def stage(self, name: Stage, fatal: bool = True) -> Iterator[None]:
        """Time a stage; a failure of a ``fatal`` stage is a model-level miss that ends the flow."""
        self.run.stage = name
        self.save()
        print(f"zoo: {self.zoo.name}: {name}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        try:
            yield
        except Exception as e:
            if not fatal:
                raise
            self.run.miss(name, describe(e))
            raise StageFailed(name) from None
        finally:
            self.run.stage_s[name] = round(self.run.stage_s.get(name, 0.0) + time.perf_counter() - t0, 2)
            self.save()

    def go(self) -> None:
        try:
            self.prepare()
            self.compile()
            self.propose()
            if self.stop_after == "carve":
                self.carve_each()
                self.carve_together()
            self.run.status = "done"
        except StageFailed:
            self.run.status = "failed"
        self.save()

    # -- stages ----------------------------------------------------------------------------------
    def prepare(self) -> None:
        from ytk_core.stages.prepare import do_prepare

        with self.stage("prepare"):
            self.base.mkdir(parents=True, exist_ok=True)
            out = do_prepare(self.zoo.path, self.base / "model.onnx", self.base / "model.npz",
                             self.base / "model.reference.npz", [])
            self.run.fx_nodes = out.trace.fx_node_count
            self.run.onnx_nodes = out.trace.onnx_node_count
            self.run.coverage = out.trace.coverage

    def compile(self) -> None:
        from ytk_core.stages.compile import run_compile

        with self.stage("compile"):
            out = run_compile(self.arch, PRECISION, self.base / "model.onnx", self.base / "model.npz",
                              self.base / "base.tgz", [])
            self.run.baseline_ms = out.totals()["median_ms"]
            self.run.simulated = out.manifest.simulated
            self.run.engine = out.manifest.engine_backend

    def propose(self) -> None:
        from ytk_core.propose import ProposeOptions, propose

        with self.stage("propose"):
            report = propose(self.base / "base.tgz", self.base / "model.onnx", self.base / "fx_nodes.json", None,
                             ProposeOptions(min_ms=self.min_ms, launch_ms=self.launch_ms, kernelgen="auto"))
            props = [p for p in report.proposals if not p.already_plugged and p.selector]
            self.run.warnings = list(report.warnings)
            self.run.candidates = [CandidateRun(name=p.name, selector=p.selector, kind=p.kind, label=p.label,
                                                sites=len(p.sites), ms=round(p.ms, 4)) for p in props]
            self.run.proposals = len(props)
            self.run.profile_ms = round(report.total_ms, 4)
            self.run.time_by_family = family_times(report, self.base / "model.onnx")
            real = report.real_support
            self.run.real_chain = real.chain if real is not None and real.chain else ",".join(
                sorted({p.support_backend for p in report.proposals if p.support_backend}))

    def carve_each(self) -> None:
        """Each proposal on its own, so one refusal hides no other; then ask about each carved region."""
        for cand in self.run.candidates:
            dest = self.workdir / "carve" / cand.name
            t0 = time.perf_counter()
            try:
                with self.stage("carve", fatal=False):
                    carved = self.carve([cand.selector], dest)
            except Exception as e:
                cand.carved = False
                self.run.miss("carve", describe(e), cand.selector)
                continue
            finally:
                cand.carve_s = round(time.perf_counter() - t0, 2)
            cand.carved = True
            mine = next((c for c in carved.candidates if c.name == cand.name), None)
            if mine is None:
                cand.carved = False
                self.run.miss("carve", f"the carve wrote no candidate named {cand.name}", cand.selector)
                continue
            cand.op_inventory = dict(mine.op_inventory)
            self.support(cand, mine, dest)
            self.recognise(cand, mine, dest)
            self.save()

    def carve_together(self) -> None:
        accepted = [c.selector for c in self.run.candidates if c.carved]
        if len(accepted) < 2:
            self.run.carved_together = True if accepted else None  # one selector: its own carve is the carve
            return
        try:
            with self.stage("carve-together", fatal=False):
                self.carve(accepted, self.workdir / "carve-together")
            self.run.carved_together = True
        except Exception as e:
            self.run.carved_together = False
            self.run.miss("carve-together", describe(e), getattr(e, "selector", None))

    # -- helpers ---------------------------------------------------------------------------------
    def carve(self, selectors: list[str], dest: Path) -> Any:
        """``ytk embedded prepare --plugin ...`` on a copy of the baseline's prepare dir (no second trace)."""
        from ytk_core.frontend.selectors import parse_selector
        from ytk_core.runtime import runtime
        from ytk_hookspecs.models import CandidatesFile, CarveRequest

        for s in selectors:
            parse_selector(s)
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        for name in BASE_FILES:
            shutil.copy2(self.base / name, dest / name)
        rt = runtime()
        front = rt.frontend()
        res = front.backend.impl.carve(CarveRequest(prepare_dir=dest, onnx=dest / "model.onnx",
                                                    fx_nodes=dest / "fx_nodes.json", selectors=selectors),
                                       rt.context(front, "carve", dest))
        return CandidatesFile.read(res.candidates)

    def support(self, cand: CandidateRun, carved: Any, dest: Path) -> None:
        """The selected kernel generator's answer (its supports()), where the tree has it."""
        try:
            from ytk_core.stages.supports import check_support
        except ImportError:
            self.run.supports_hook = False
            cand.support_why = NO_SUPPORTS_HOOK
            return
        self.run.supports_hook = True
        kwargs: dict[str, Any] = {}
        if "arch" in inspect.signature(check_support).parameters:
            from ytk_hookspecs.models import ArchSpec

            kwargs["arch"] = ArchSpec.parse(self.arch)
        try:
            with self.stage("support", fatal=False):
                answer = check_support(carved, dest, None, **kwargs)
        except Exception as e:
            cand.supported = False
            cand.support_why = describe(e)
            self.run.miss("support", cand.support_why, cand.selector)
            return
        cand.supported = bool(answer.supported)
        cand.support_backend = answer.backend
        cand.support_why = answer.why
        self.run.kernelgen = answer.backend or self.run.kernelgen
        if not answer.supported:
            self.run.miss("support", f"{answer.backend}: {answer.why}", cand.selector)

    def recognise(self, cand: CandidateRun, carved: Any, dest: Path) -> None:
        """Would the templates generator take it? Its recogniser on the carved .pt2 (no GPU needed)."""
        from ytk_hookspecs.errors import UnsupportedRegion

        try:
            with self.stage("templates", fatal=False):
                if not carved.files.pt2:
                    raise UnsupportedRegion("the carve wrote no .pt2 for this region")
                from ytk_backend_templates.recognise import load_graph, recognise

                region = recognise(load_graph(dest / carved.files.pt2), carved)
        except UnsupportedRegion as e:
            cand.recognised, cand.recognise_why = False, str(e)
        except Exception as e:
            cand.recognised, cand.recognise_why = False, describe(e)
        else:
            cand.recognised = True
            cand.recognised_as = _region_text(region)
            return
        self.run.miss("templates", cand.recognise_why, cand.selector)


#: ONNX ops propose builds a region around (a conv, a GEMM, attention): left out of every proposal, they were
#: judged not worth a kernel (at roofline, or under --min-ms); other compute had nothing to build one around.
HEAVY_ONNX = {"Conv", "ConvTranspose", "Gemm", "MatMul", "Einsum", "Attention"}


def family_times(report: Any, onnx_path: Path) -> list[FamilyTime]:
    """``report``'s per-layer times by where they went: each proposal's layers under its op (``op_of`` its name:
    the shape families of one op together), compute layers of no proposal under their ONNX op types (``not worth``
    where they hold a heavy op, else ``outside regions``), and reformats / engine-internal layers as glue. The
    entries sum to the profile's total."""
    import onnx

    from ytk_core.propose.naming import op_of

    op_type = {n.name: n.op_type for n in onnx.load(str(onnx_path), load_external_data=False).graph.node}
    real = report.real_support
    owner: dict[str, Any] = {}
    for prop in report.proposals:
        for site in prop.sites:
            owner.update({node: prop for node in site.onnx_nodes})
    out: dict[tuple[str, str], FamilyTime] = {}
    for prop in report.proposals:
        if real is not None and real.chain:  # a simulated generator answered: what the real chain would take
            taken, why = prop.name in real.takes, real.refuses.get(prop.name, "")
        else:
            taken, why = prop.supported, ("" if prop.supported else prop.support_why)
        f = out.setdefault(("proposed", op_of(prop.name)), FamilyTime(family=op_of(prop.name), where="proposed",
                                                                      ms=0.0))
        f.sites += len(prop.sites)
        if taken is not None:  # a family is taken where any of its shape families is
            f.taken = bool(taken) or bool(f.taken)
        f.why = f.why or why
    for layer in report.layers:
        if layer.kind in ("reformat", "engine"):
            key = ("glue", "glue")
        elif layer.kind == "plugin" or any(n in owner for n in layer.onnx_nodes):
            props = {owner[n].name: owner[n] for n in layer.onnx_nodes if n in owner}
            key = ("proposed", op_of(next(iter(props)))) if props else ("proposed", "plugged already")
        else:
            types = sorted({op_type.get(n, "?") for n in layer.onnx_nodes}) or ["(no ONNX node)"]
            key = ("not worth" if HEAVY_ONNX & set(types) else "outside regions", "+".join(types))
        f = out.setdefault(key, FamilyTime(family=key[1], where=key[0], ms=0.0))  # type: ignore[arg-type]
        if key[0] in ("not worth", "outside regions"):
            f.sites += 1
        f.ms += layer.ms
    for f in out.values():
        f.ms = round(f.ms, 5)
    return sorted(out.values(), key=lambda f: -f.ms)


def _region_text(region: Any) -> str:
    fields = {k: v for k, v in vars(region).items() if v is not None and k != "kind"}
    return f"{getattr(region, 'kind', type(region).__name__)}({', '.join(f'{k}={v}' for k, v in fields.items())})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", help="a zoo model (contrib/zoo/zoo_registry.py)")
    ap.add_argument("--workdir", type=Path, required=True, help="this model's directory (result.json lands there)")
    ap.add_argument("--arch", default=ARCH)
    ap.add_argument("--min-ms", type=float, default=0.0, help="propose's --min-ms (default 0)")
    ap.add_argument("--launch-ms", type=float, default=0.0, help="propose's --launch-ms (default 0)")
    ap.add_argument("--stop-after", choices=("propose", "carve"), default="carve",
                    help="propose: no carves (the families table needs only the measured profile)")
    args = ap.parse_args(argv)
    try:
        zoo = entry(args.name)
    except KeyError as e:
        print(f"error: {e.args[0]}", file=sys.stderr)
        return 2
    args.workdir.mkdir(parents=True, exist_ok=True)
    flow = Flow(zoo, args.workdir.resolve(), args.arch, args.min_ms, args.launch_ms, args.stop_after)
    try:
        flow.go()
    except BaseException as e:  # a harness bug: still leave a result saying so
        flow.run.status = "crashed"
        flow.run.miss("crash", f"during {flow.run.stage}: {describe(e)}")
        flow.save()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

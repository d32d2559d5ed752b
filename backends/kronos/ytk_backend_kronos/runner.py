"""One job's compile, in a child process of the worker: ``python -m ytk_backend_kronos.runner JOBDIR``.

It runs :func:`ytk_core.stages.compile.run_compile` on the unpacked job exactly as ``ytk embedded
compile`` would on this machine (the same checks, the admission gate for a real engine, the same
bundle), logs to stdout (the worker keeps it as the job's log) and writes ``result.json``. A child
of its own keeps an engine that crashes or hangs away from the worker, lets each job see only its
GPU, and dies with the worker (``PR_SET_PDEATHSIG``), so a killed worker leaves no compile behind.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path
from typing import Literal

from pydantic import Field

from ytk_hookspecs.models import Versioned
from ytk_hookspecs.service.queue import die_with_parent

RESULT = "result.json"
WORK = "work"
OUT = "out"


class JobOutcome(Versioned):
    """What the child reports to the worker (``<job>/result.json``)."""

    state: Literal["succeeded", "failed"]
    error: str = ""
    exit_code: int = 0
    warnings: list[str] = Field(default_factory=list)
    bundle: str | None = None


def run_job(job_dir: Path, engine: str) -> JobOutcome:
    from ytk_core.errors import YtkError
    from ytk_core.kronos.protocol import JOB_SPEC, JobSpec
    from ytk_core.stages.compile import run_compile
    from ytk_hookspecs.errors import StageError

    work = job_dir / WORK
    try:
        spec = JobSpec.read(work / JOB_SPEC)
        out = job_dir / OUT / spec.output_name
        res = run_compile(spec.arch, spec.precision, work / spec.onnx, work / spec.npz, out,
                          [work / p.path for p in spec.plugins], spec.iterations, spec.warmup, engine=engine,
                          allow_unused_plugin=spec.allow_unused_plugin, allow_unverified=spec.allow_unverified)
    except StageError as e:
        msg = e.render() if isinstance(e, YtkError) else str(e)
        print(f"error: {msg}", flush=True)
        return JobOutcome(state="failed", error=_local_paths_out(msg, work), exit_code=e.exit_code)
    except Exception as e:  # noqa: BLE001  -- a bug below is the job's failure, never the worker's
        traceback.print_exc(file=sys.stdout)
        first = (str(e).strip().splitlines() or [""])[0][:300]
        return JobOutcome(state="failed", exit_code=1,
                          error=f"internal error on the worker: {type(e).__name__}: {first} (its job log has the "
                                "traceback; this is a ytk bug, please report it)")
    return JobOutcome(state="succeeded", warnings=[_local_paths_out(w, work) for w in res.warnings],
                      bundle=str(res.bundle.relative_to(job_dir)))


def _local_paths_out(text: str, work: Path) -> str:
    """The worker's job folder means nothing to the client: paths in a message are the archive's."""
    from ytk_hookspecs.service.http import local_paths_out

    return local_paths_out(text, work)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ytk_backend_kronos.runner")
    ap.add_argument("job_dir", type=Path)
    ap.add_argument("--engine", required=True)
    ap.add_argument("--parent", type=int, required=True)
    args = ap.parse_args(argv)
    die_with_parent(args.parent)
    from ytk_core.logs import configure

    configure(0, "json")  # the worker renders each line for the job's log and takes its event as the message
    outcome = run_job(args.job_dir, args.engine)
    outcome.write(args.job_dir / RESULT)
    return 0


if __name__ == "__main__":
    sys.exit(main())

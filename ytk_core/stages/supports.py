"""Ask the selected kernel generator whether it would take a region, before paying for it.

propose asks with a :class:`~ytk_hookspecs.models.RegionSketch` (no carve yet), the autoloop and
``ytk kernelgen compile --dry-run`` ask again with the carved candidate and its canonical ``.pt2``.
An answer that is not a :class:`~ytk_hookspecs.models.SupportAnswer`, or an error, is a refusal naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ytk_hookspecs.models import ArchSpec, Candidate, RegionSketch, SupportAnswer, SupportRequest

from ..runtime import runtime


def ask(request: SupportRequest, kernelgen: str | None, arch: ArchSpec | None = None,
        selection: Any = None) -> SupportAnswer:
    """The selected generators' answer (``selection``: one selection or a chain; else the chain that
    ``kernelgen`` names): the first that takes the region, else a refusal giving each one's reason,
    certain only when every refusal is. An error inside a backend becomes a 'not supported' answer
    naming it (a broken answer must not stop propose or the loop), except one that says the backend cannot be
    used at all (``stops_the_loop``: a service's URL or token is wrong), which is raised."""
    rt = runtime()
    chain = selection if isinstance(selection, list) else [selection] if selection is not None else \
        rt.select_chain("kernelgen", kernelgen, arch)
    answers = []
    for sel in chain:
        ans = _ask_one(request, sel)
        if ans.supported:
            return ans
        answers.append(ans)
    if len(answers) == 1:
        return answers[0]
    return SupportAnswer(supported=False, certain=all(a.certain for a in answers),
                         backend=",".join(s.name for s in chain),
                         why="; ".join(f"{a.backend}: {' '.join(a.why.split())}" for a in answers))


def _ask_one(request: SupportRequest, sel: Any) -> SupportAnswer:
    rt = runtime()
    try:
        ans = sel.backend.impl.supports(request, rt.context(sel, "kernelgen"))
    except Exception as e:  # a third-party backend's bug is its answer, not the caller's crash
        if getattr(e, "stops_the_loop", False):
            raise  # the backend cannot be used at all (its service's settings are wrong): the user must know now
        rt.log.debug("supports raised", backend=sel.name, error=repr(e))
        return SupportAnswer(supported=False, certain=False, backend=sel.name,
                             why=f"{sel.name} failed to answer: {type(e).__name__}: {str(e)[:200]}")
    if not isinstance(ans, SupportAnswer):
        return SupportAnswer(supported=False, certain=False, backend=sel.name,
                             why=f"{sel.name} answered a {type(ans).__name__}, not a SupportAnswer")
    return ans if ans.backend else ans.model_copy(update={"backend": sel.name})


def check_sketch(sketch: RegionSketch, kernelgen: str | None, arch: ArchSpec | None = None,
                 precision: str = "fp16", selection: Any = None) -> SupportAnswer:
    return ask(SupportRequest(sketch=sketch, precision=precision, arch=arch.spec if arch else None),  # type: ignore[arg-type]
               kernelgen, arch, selection)


def check_support(candidate: Candidate, prepare_dir: Path, kernelgen: str | None, arch: ArchSpec | None = None,
                  precision: str = "fp16", selection: Any = None) -> SupportAnswer:
    """After the carve: the candidate and its ``.pt2`` (the canonical region program)."""
    pt2 = (Path(prepare_dir) / candidate.files.pt2) if candidate.files.pt2 else None
    return ask(SupportRequest(candidate=candidate, reference=pt2.resolve() if pt2 else None,  # type: ignore[arg-type]
                              precision=precision, arch=arch.spec if arch else None), kernelgen, arch, selection)

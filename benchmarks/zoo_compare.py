"""Compare two ``benchmarks/zoo.py --json`` reports model by model: what a change did to the corpus.

    python benchmarks/zoo_compare.py runs/zoo_session17.json runs/zoo_session18.json [--reasons]

For each model: status, proposal count, and per proposal (keyed by selector) whether it carved, whether
the templates recognised it (and as what), and its carved op inventory; the misses keyed by (stage,
selector). Wall times are left out: they differ on every run. ``--reasons`` also lists misses whose
reason text changed (the same miss, reworded). Exit 0 when nothing but wall time (and, without
``--reasons``, reason wording) differs, 1 otherwise, 2 when a report does not read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

from zoo_results import ModelRun, ZooReport  # noqa: E402


def _candidates(run: ModelRun) -> dict[str, tuple]:  # type: ignore[type-arg]
    """Per selector (a repeated one numbered, ``sel #2``), what its carve and recognition gave."""
    out: dict[str, tuple] = {}  # type: ignore[type-arg]
    for c in run.candidates:
        key, k = c.selector, 2
        while key in out:
            key, k = f"{c.selector} #{k}", k + 1
        out[key] = (c.carved, c.recognised, c.recognised_as, tuple(sorted(c.op_inventory.items())))
    return out


def _misses(run: ModelRun) -> dict[tuple[str, str], str]:
    """Per (stage, selector) the miss's reason; several for one key (model-level misses have no selector)
    are numbered in the order the run recorded them."""
    out: dict[tuple[str, str], str] = {}
    for m in run.misses:
        key, k = (m.stage, m.selector or ""), 2
        while key in out:
            key, k = (m.stage, f"{m.selector or '(model)'} #{k}"), k + 1
        out[key] = m.reason
    return out


def _gone_and_new(name: str, what: str, a: dict, b: dict, gone: Callable[[Any, Any], str],  # type: ignore[type-arg]
                  new: Callable[[Any, Any], str]) -> list[str]:
    """``name: <what> gone: ...`` for each key only in ``a``, ``name: <what> new: ...`` for each only in ``b``."""
    return ([f"{name}: {what} gone: {gone(k, a[k])}" for k in sorted(a.keys() - b.keys())]
            + [f"{name}: {what} new: {new(k, b[k])}" for k in sorted(b.keys() - a.keys())])


def compare(old: ZooReport, new: ZooReport, reasons: bool) -> list[str]:
    """One line per difference, ``model: what`` (empty: the runs agree)."""
    out: list[str] = []
    a, b = {r.name: r for r in old.models}, {r.name: r for r in new.models}
    for name in sorted(a.keys() - b.keys()):
        out.append(f"{name}: only in the old report")
    for name in sorted(b.keys() - a.keys()):
        out.append(f"{name}: only in the new report")
    for name in sorted(a.keys() & b.keys()):
        ra, rb = a[name], b[name]
        if (ra.status, ra.proposals) != (rb.status, rb.proposals):
            out.append(f"{name}: status {ra.status} -> {rb.status}, proposals {ra.proposals} -> {rb.proposals}")
        ca, cb = _candidates(ra), _candidates(rb)
        out += _gone_and_new(name, "proposal", ca, cb, lambda sel, v: f"{sel}",
                             lambda sel, v: f"{sel} (carved {v[0]}, recognised {v[1]})")
        for sel in sorted(ca.keys() & cb.keys()):
            if ca[sel] != cb[sel]:
                (c0, r0, as0, inv0), (c1, r1, as1, inv1) = ca[sel], cb[sel]
                what = []
                if c0 != c1:
                    what.append(f"carved {c0} -> {c1}")
                if (r0, as0) != (r1, as1):
                    what.append(f"recognised {r0} {as0!r} -> {r1} {as1!r}")
                if inv0 != inv1:
                    what.append("op inventory changed")
                out.append(f"{name}: {sel}: {', '.join(what)}")
        ma, mb = _misses(ra), _misses(rb)
        miss = lambda key, reason: f"{key[0]} {key[1] or '(model)'}: {reason}"  # noqa: E731
        out += _gone_and_new(name, "miss", ma, mb, miss, miss)
        if reasons:
            for key in sorted(ma.keys() & mb.keys()):
                if ma[key] != mb[key]:
                    out.append(f"{name}: reworded: {key[0]} {key[1] or '(model)'}: {ma[key]!r} -> {mb[key]!r}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--reasons", action="store_true", help="also list misses whose reason was reworded")
    args = ap.parse_args(argv)
    try:
        old, new = (ZooReport.model_validate_json(p.read_text()) for p in (args.old, args.new))
    except (OSError, ValueError) as e:
        print(f"error: cannot read a zoo report: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    lines = compare(old, new, args.reasons)
    for line in lines:
        print(line)
    n_old, n_new = len(old.models), len(new.models)
    print(f"{n_old} / {n_new} models; {len(lines)} difference(s) beyond wall time"
          + ("" if args.reasons else " and reason wording"))
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())

"""Per-shape dispatch: one plugin whose launcher runs, for each site shape, that shape's best variant.

A dynamic remainder serves sites of very different shapes (a 1x1 conv at 16 -> 16 channels on 2M
pixels and at 1024 -> 256 on 8k pixels); the variant that is best in total can be the worst on some
of them. When the per-shape winners differ and together would be clearly faster, this builds a
dispatch variant: the winners' kernels each in their own namespace, and a launcher that compares
the runtime extents with each scored site shape and calls that shape's winner (any other shape
runs the best-in-total variant). The dispatch variant is then built, checked and timed by the
harness like every other candidate: its figures are measured, not the sum of its parts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ytk_hookspecs.models import PluginMeta
from ytk_hookspecs.shape_expr import evaluate_extents

from .emit_common import Variant, plain_launcher, rounds_weights_to_fp16
from .regions import SiteShape

#: Build a dispatch variant only when the per-shape winners would save at least this share.
MIN_SAVING = 0.03


def per_shape_winners(scored: Sequence[Any], counts: Sequence[int]) -> tuple[list[Any], float] | None:
    """For each shape, the valid scored variant fastest on it, and the estimated total (ms, each
    shape times its site count); None when no variant is valid or one variant wins every shape."""
    ok = [s for s in scored if s.total_ms is not None and len(s.shape_ms) == len(counts)]
    if not ok:
        return None
    best = [min(ok, key=lambda s, i=i: s.shape_ms[i]) for i in range(len(counts))]
    if len({id(b) for b in best}) < 2:
        return None
    return best, sum(b.shape_ms[i] * n for i, (b, n) in enumerate(zip(best, counts)))


def dispatch_parts(scored: Sequence[Any], counts: Sequence[int]) -> tuple[list[Any], Any] | None:
    """Each shape's fastest variant, and the fastest in total (the dispatch's default), when a dispatch over
    them would be built (they differ, none needs a workspace, and together they would save at least
    :data:`MIN_SAVING`); else None."""
    if any(s.variant.workspace for s in scored):
        return None  # variants with a workspace would need a dispatching workspace query too
    found = per_shape_winners(scored, counts)
    if found is None:
        return None
    best, estimate = found
    single = min((s for s in scored if s.total_ms is not None), key=lambda s: s.total_ms)
    return (best, single) if estimate <= (1.0 - MIN_SAVING) * single.total_ms else None


def _strip_launcher(v: Variant) -> str:
    """The variant's namespace without its extern "C" entry point (the dispatcher is the only one)."""
    text, n = re.subn(rf'\nextern "C" int {re.escape(v.launcher)}\(.*?\n}}\n', "\n", v.body, flags=re.S)
    if n != 1:
        raise ValueError(f"variant {v.name}: cannot find its launcher {v.launcher}")
    return text


def dispatch_variant(scored: Sequence[Any], shapes: Sequence[SiteShape], meta: PluginMeta,
                     ns: str = "ytk_dispatch") -> Variant | None:
    """The dispatch variant for ``scored`` (see module doc), or None when it would not pay."""
    picked = dispatch_parts(scored, [s.count for s in shapes])
    if picked is None:
        return None
    best, single = picked
    parts: list[Any] = []
    for b in [single, *best]:
        if all(b is not p for p in parts):
            parts.append(b)
    names = list(meta.extents)
    lines = []
    for i, (site, b) in enumerate(zip(shapes, best)):
        ext = evaluate_extents(meta.extents, [list(t) for t in site.inputs])
        cond = " && ".join(f"e[{k}] == {ext[n]}" for k, n in enumerate(names))
        lines.append(f"  if ({cond}) return {_namespace(b.variant)}::launch(inputs, outputs, e, stream);"
                     f"  // shape {i}: {b.variant.name}")
    body = "\n".join(_strip_launcher(p.variant) for p in parts)
    body += (f"\nnamespace {ns} {{\n"
             "// Each scored site shape runs its fastest variant; any other shape the fastest in total.\n"
             "int launch(const void* const* inputs, void* const* outputs, const int64_t* e, cudaStream_t stream) {\n"
             + "\n".join(lines) + "\n"
             f"  return {_namespace(single.variant)}::launch(inputs, outputs, e, stream);\n}}\n}}  // namespace {ns}\n")
    launcher = f"{ns}_launch"
    body += plain_launcher(ns, launcher)
    winners = [b.variant.name for b in best]
    params: dict[str, Any] = {"dispatch": ";".join(f"shape{i}={w}" for i, w in enumerate(winners)),
                              "default": single.variant.name}
    if any(rounds_weights_to_fp16(p.variant.params) for p in parts):
        params["weights"] = "fp16"  # judged, like its parts, with the budget of fp16 weights
    return Variant(name="dispatch[" + ",".join(dict.fromkeys(winners)) + "]", params=params, body=body,
                   launcher=launcher, namespace=ns)


def _namespace(v: Variant) -> str:
    if v.namespace:
        return v.namespace
    m = re.search(r"namespace (\w+) \{", v.body)
    if m is None:
        raise ValueError(f"variant {v.name} has no namespace")
    return m.group(1)

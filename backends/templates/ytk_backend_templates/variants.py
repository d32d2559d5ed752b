"""Every kernel variant of a region, named and emitted for one scoring build."""

from __future__ import annotations

from ytk_hookspecs.models import PluginMeta

from . import emit_conv1x1, emit_dwconv, emit_dwln, emit_litemla, emit_se
from .emit_common import Variant, rounds_weights_to_fp16, variant_namespace
from .regions import Conv1x1Region, DwConvLNRegion, DwConvRegion, LiteMLARegion, Region, SERegion


def region_variants(region: Region, limit: int | None = None, wide: bool = False, sm: int = 0,
                    fp16_weights: bool = True) -> list[Variant]:
    """All variants of ``region`` for sm ``sm`` (optionally the first ``limit``), each in its own
    namespace named after the variant (``ytk_<name>``, not its position: adding a variant to the
    space leaves the others' text as it was). ``sm`` 0 (not known yet) leaves out the points that
    need a newer GPU (the TMA ring).

    ``wide`` (a re-optimization) also keeps the tuning points the default search filters out by
    its register and tile heuristics: a larger search that costs more build and scoring time.
    ``fp16_weights=False`` leaves out the variants that round the weights to fp16 (``weights:
    fp16``, scored with that rounding's budget)."""
    out: list[Variant] = []
    space: list = (emit_dwconv.variant_space(region, wide, sm) if isinstance(region, DwConvRegion)
                   else emit_conv1x1.variant_space(region, wide) if isinstance(region, Conv1x1Region)
                   else emit_se.variant_space(region) if isinstance(region, SERegion)
                   else emit_dwln.variant_space(region) if isinstance(region, DwConvLNRegion)
                   else emit_litemla.variant_space(region))
    if not fp16_weights:
        space = [p for p in space if not rounds_weights_to_fp16(p.params)]
    for p in space[:limit] if limit else space:
        ns = variant_namespace(p.name)
        if isinstance(region, DwConvRegion):
            out.append(emit_dwconv.emit(region, p, ns, f"{ns}_launch"))
        elif isinstance(region, Conv1x1Region):
            out.append(emit_conv1x1.emit(region, p, ns, f"{ns}_launch"))
        elif isinstance(region, SERegion):
            out.append(emit_se.emit(region, p, ns, f"{ns}_launch", f"{ns}_workspace"))
        elif isinstance(region, DwConvLNRegion):
            out.append(emit_dwln.emit(region, p, ns, f"{ns}_launch"))
        else:
            assert isinstance(region, LiteMLARegion)
            out.append(emit_litemla.emit(region, p, ns, f"{ns}_launch", f"{ns}_workspace"))
    return out


def bench_meta(meta: PluginMeta, variant: Variant) -> PluginMeta:
    return meta.model_copy(update={"launcher": variant.launcher, "workspace": variant.workspace})

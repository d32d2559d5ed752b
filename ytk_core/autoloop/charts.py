"""The autoloop report's two charts, drawn with matplotlib (Agg): an SVG for the markdown and a PNG
beside each for viewers that do not render SVG.

- latency by round: the engine each round compiled (bars; a round that built no engine has no bar
  and is named under the axis) and the best engine so far (a step line), p50 ms on a labelled axis;
- time per region: for each plugin in the final engine, the engine's time for its region before and
  the plugin's time after (summed over its sites), ms on a labelled axis.

Every figure says where its numbers come from (``unit_note``: SIMULATED for the mock target).
matplotlib is imported only here, when a report is written; without it the report has no charts and
says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class RoundPoint:
    label: str               # "base", "round 1", ...
    measured_ms: float | None  # the round's compiled engine, None when it built none
    best_ms: float           # the best engine after this round


def _plt():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg", force=True)
    matplotlib.rcParams["svg.fonttype"] = "none"   # text stays text: searchable, and readable by tools
    matplotlib.rcParams["svg.hashsalt"] = "ytk"    # the same report draws the same file
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path_svg: Path) -> list[Path]:  # type: ignore[no-untyped-def]
    """SVG and PNG, each written to a temp name and renamed (a reader never sees half a chart)."""
    import os

    out = []
    for path, kw in ((path_svg, {"format": "svg", "metadata": {"Date": None}}),
                     (path_svg.with_suffix(".png"), {"format": "png", "dpi": 110})):
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        fig.savefig(tmp, bbox_inches="tight", **kw)
        os.replace(tmp, path)
        out.append(path)
    return out


def latency_by_round(points: list[RoundPoint], unit_note: str, path_svg: Path) -> list[Path]:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(4.5, 1.1 * len(points) + 2.5), 3.6))
    xs = list(range(len(points)))
    built = [(x, p.measured_ms) for x, p in zip(xs, points) if p.measured_ms is not None]
    bars = ax.bar([x for x, _ in built], [v for _, v in built], width=0.55, color="#4878a8",
                  label="engine compiled in this round")
    ax.bar_label(bars, labels=[f"{v:.3f}" for _, v in built], padding=2, fontsize=8)
    ax.step(xs, [p.best_ms for p in points], where="mid", color="#c0504d", linewidth=1.6, label="best so far")
    ax.set_xticks(xs, [p.label for p in points])
    ax.set_xlabel("autoloop round")
    ax.set_ylabel("end-to-end latency, p50 (ms)")
    ax.set_ylim(0, max([v for _, v in built] + [p.best_ms for p in points] + [1e-9]) * 1.18)
    ax.set_title("Latency by round", fontsize=11)
    empty = [p.label for p in points if p.measured_ms is None]
    note = unit_note + (f"; no engine built in {', '.join(empty)}" if empty else "")
    return _finish(plt, fig, ax, note, "lower left", "y", path_svg)


def regions_before_after(rows: list[tuple[str, float, float | None]], unit_note: str,
                         path_svg: Path) -> list[Path]:
    plt = _plt()
    n = max(1, len(rows))
    fig, ax = plt.subplots(figsize=(7.5, 1.2 + 0.42 * n))
    ys = list(range(len(rows)))
    h = 0.38
    before = ax.barh([y - h / 2 for y in ys], [b for _, b, _ in rows], height=h, color="#c0504d",
                     label="engine's own ops (before)")
    ax.bar_label(before, labels=[f"{b:.3f}" for _, b, _ in rows], padding=2, fontsize=7)
    after_rows = [(y, a) for y, (_, _, a) in zip(ys, rows) if a is not None]
    after = ax.barh([y + h / 2 for y, _ in after_rows], [a for _, a in after_rows], height=h, color="#4f9d69",
                    label="plugin (after)")
    ax.bar_label(after, labels=[f"{a:.3f}" for _, a in after_rows], padding=2, fontsize=7)
    ax.set_yticks(ys, [name for name, _, _ in rows])
    ax.invert_yaxis()
    ax.set_xlabel("time per inference, all sites of the region (ms)")
    peak = max([b for _, b, _ in rows] + [a for _, a in after_rows] + [1e-9])
    ax.set_xlim(0, peak * 1.2)
    ax.set_title("Time per plugged region, before and after", fontsize=11)
    if not rows:
        ax.text(0.5, 0.5, "no plugin in the final engine", transform=ax.transAxes, ha="center", va="center")
    return _finish(plt, fig, ax, unit_note, "best" if rows else None, "x", path_svg)


def _finish(plt, fig, ax, note: str, legend_loc: str | None, grid_axis: str,  # type: ignore[no-untyped-def]
            path_svg: Path) -> list[Path]:
    """What both charts end with: the figures' source under the axis label (a fixed distance in points, so
    a tall chart has no blank band), legend, grid, SVG + PNG written."""
    ax.annotate(note, xy=(0.5, 0), xycoords="axes fraction", xytext=(0, -44), textcoords="offset points",
                ha="center", va="top", fontsize=8, color="#555555")
    if legend_loc:
        ax.legend(fontsize=8, loc=legend_loc)
    ax.grid(axis=grid_axis, alpha=0.3)
    try:
        return _save(fig, path_svg)
    finally:
        plt.close(fig)

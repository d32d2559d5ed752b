"""Two small SVG charts for the autoloop report (no plotting dependency needed)."""

from __future__ import annotations

from html import escape


def _svg(w: int, h: int, body: list[str], title: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
            f'font-size="12"><rect width="100%" height="100%" fill="white"/>'
            f'<text x="{w // 2}" y="18" text-anchor="middle" font-size="14">{escape(title)}</text>'
            + "".join(body) + "</svg>\n")


def latency_by_round(points: list[tuple[str, float]], unit_note: str) -> str:
    """Bars: end-to-end latency after each round."""
    w, h, left, bottom, top = 120 + 90 * max(1, len(points)), 320, 60, 50, 40
    peak = max((v for _, v in points), default=1.0) or 1.0
    body = [f'<line x1="{left}" y1="{h - bottom}" x2="{w - 20}" y2="{h - bottom}" stroke="black"/>']
    for i, (label, v) in enumerate(points):
        bh = (h - bottom - top) * v / peak
        x = left + 20 + i * 90
        body.append(f'<rect x="{x}" y="{h - bottom - bh:.1f}" width="50" height="{bh:.1f}" fill="#4878a8"/>')
        body.append(f'<text x="{x + 25}" y="{h - bottom - bh - 5:.1f}" text-anchor="middle">{v:.3f}</text>')
        body.append(f'<text x="{x + 25}" y="{h - bottom + 16}" text-anchor="middle">{escape(label)}</text>')
    body.append(f'<text x="{w // 2}" y="{h - 12}" text-anchor="middle" fill="#555">{escape(unit_note)}</text>')
    return _svg(w, h, body, "latency by round (p50 ms)")


def regions_before_after(rows: list[tuple[str, float, float | None]], unit_note: str) -> str:
    """Paired horizontal bars per region: engine time before the plugin and the plugin's time after."""
    row_h, left, w = 34, 170, 720
    h = 70 + row_h * max(1, len(rows))
    peak = max((max(b, a or 0.0) for _, b, a in rows), default=1.0) or 1.0
    scale = (w - left - 90) / peak
    body = [f'<rect x="{left}" y="28" width="12" height="10" fill="#c0504d"/><text x="{left + 16}" y="37">before</text>',
            f'<rect x="{left + 80}" y="28" width="12" height="10" fill="#4f9d69"/>'
            f'<text x="{left + 96}" y="37">after</text>']
    for i, (name, before, after) in enumerate(rows):
        y = 50 + i * row_h
        body.append(f'<text x="{left - 6}" y="{y + 16}" text-anchor="end">{escape(name)}</text>')
        body.append(f'<rect x="{left}" y="{y}" width="{before * scale:.1f}" height="12" fill="#c0504d"/>')
        body.append(f'<text x="{left + before * scale + 4:.1f}" y="{y + 10}">{before:.3f}</text>')
        if after is not None:
            body.append(f'<rect x="{left}" y="{y + 14}" width="{after * scale:.1f}" height="12" fill="#4f9d69"/>')
            body.append(f'<text x="{left + after * scale + 4:.1f}" y="{y + 24}">{after:.3f}</text>')
    body.append(f'<text x="{w // 2}" y="{h - 8}" text-anchor="middle" fill="#555">{escape(unit_note)}</text>')
    return _svg(w, h, body, "time per region before and after (ms)")

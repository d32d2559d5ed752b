"""The human report: the spec's WHAT TO PLUG / NOT WORTH PLUGGING tables, and the --verbose detail."""

from __future__ import annotations

import re


from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .api import engine_word
from .models import Proposal, ProposeReport, RealSupport


def _fmt(total: float):  # type: ignore[no-untyped-def]
    """Decimals that keep the model's scale readable: 70.3 ms models in tenths, tiny ones in microseconds."""
    d = 1 if total >= 10 else (2 if total >= 1 else 3)
    return lambda ms: f"{ms:.{d}f}"


def _table(title_cols: list[tuple[str, str]]) -> Table:
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold", expand=False)
    for name, justify in title_cols:
        t.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    return t


def columns(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    """Plain aligned text, as the spec prints it: long selectors stay on one line, ready to copy."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    out = []
    for r in [header, *rows]:
        cells = [c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(r)]
        out.append("   ".join(cells).rstrip())
    return out


def header_text(r: ProposeReport) -> str:
    what = f"{engine_word(r.engine) if engine_word(r.engine) != 'TRT' else 'TensorRT'} layer time"
    src = r.source_label
    if r.simulated:
        src += f" (SIMULATED: {r.engine} engine, {r.device or 'simulated target'})"
        what = "simulated " + what
    else:
        version = f" {r.engine_version}" if r.engine_version else ""
        src += f" ({r.engine}{version} engine{f' on {r.device}' if r.device else ''})"
    total = f"model total {r.total_ms:.{1 if r.total_ms >= 10 else 3}f} ms"
    if r.end_to_end_ms is not None:
        total += (f" (sum of layer medians; end-to-end median {r.end_to_end_ms:.{1 if r.end_to_end_ms >= 10 else 3}f}"
                  " ms)")
    return (f"measured: {src} — every ms below is {what} attributed to a region (today's cost = the most a plugin "
            f"can recover). {total}.")


def plug_lines(r: ProposeReport, top: int) -> list[str]:
    fmt = _fmt(r.total_ms)
    rows = [[p.label, str(len(p.sites)), fmt(p.ms), _plug_as(p)] for p in r.proposals[:top]]
    if not r.proposals:
        under = next((w for w in r.not_worth if w.category == "under_threshold"), None)
        why = "no region is worth a kernel at these thresholds"
        if under is not None:
            why += (f": {len(under.members)} region families ({under.ms:.3f} ms in all) are under --min-ms "
                    f"{r.options.min_ms:.3g} ms; --min-ms 0 lists them")
        rows.append(["(nothing)", "", "", why])
    return columns(["WHAT TO PLUG", "SITES", f"{engine_word(r.engine)} ms", "plug as (names are yours)"], rows,
                   {1, 2})


def _plug_as(p: Proposal) -> str:
    if p.already_plugged:
        return f"re-optimize: {p.ms_to_beat:.3f} ms/site to beat"
    return p.selector


def support_lines(r: ProposeReport, top: int) -> list[str]:
    """Would the selected kernel generator take each proposal (asked before any carve)?"""
    rows = []
    asked = [p for p in r.proposals[:top] if p.supported is not None]
    # a chain of generators (--kernelgen templates,triton): each row says which one takes it
    by = list(dict.fromkeys(p.support_backend or "kernelgen" for p in asked))
    backend = by[0] if by else "kernelgen"
    for p in asked:
        verdict = ("yes" if p.support_certain else "likely") if p.supported else "no"
        name = p.support_backend or "kernelgen"
        own = len(by) > 1 and "," not in name  # a refusal by the whole chain names each generator already
        rows.append([p.name, verdict, f"{name}: {p.support_why}" if own else p.support_why])
    lines = []
    if rows:
        head = f"KERNEL GENERATOR ({backend})" if len(by) == 1 else "KERNEL GENERATORS (the first that takes it)"
        lines = columns([head, "TAKES IT", "why"], rows, set())
    # a generator that takes every proposal has enough to do; one that refuses some (a generator of the
    # user's own for one op) should hear which families it would take that --roofline left out
    if asked and not any(p.supported for p in asked):
        lines.append(f"{backend} takes none of the {len(asked)} proposal{'s' if len(asked) != 1 else ''}: with it "
                     "the autoloop would plug nothing (1.00x)" + other_generators(backend))
    if r.real_support is not None and asked:
        lines.append(f"{backend} is a simulator and takes every region; "
                     + real_support_line(r.real_support, [p.name for p in asked], "proposals"))
    refused = not asked or any(not p.supported for p in asked)
    for row in r.not_worth if refused else []:
        if row.category == "roofline" and row.supported:
            some = len(row.supported_members) < len(row.members)
            what = (f": {len(row.supported_members)} of its {len(row.members)} families "
                    f"({', '.join(row.supported_members)}; {row.support_why})" if some
                    else f" ({row.ms:.3g} ms, {row.support_why})")
            lines.append(f"{row.support_backend or 'the kernel generator'} would also take {row.label}{what}, "
                         "left out below as at roofline: "
                         f"--roofline 1 lists it")
    return lines


def real_support_line(real: RealSupport, names: list[str], what: str) -> str:
    """'on a GPU the automatic kernel generator (templates) would take 0 of the 15 <what>; not the rest:
    <the commonest refusals, counted>; ask another installed generator: --kernelgen triton'."""
    if not real.chain:
        return (f"no real kernel generator is installed: on a GPU none of the {len(names)} {what} would get a "
                "kernel (`ytk backends` lists the generators)")
    taken = set(real.takes)
    n_take = sum(1 for n in names if n in taken)
    line = (f"on a GPU the automatic kernel generator{'s' if ',' in real.chain else ''} ({real.chain}) would take "
            f"{n_take} of the {len(names)} {what}")
    if n_take < len(names):
        named: dict[str, list[str]] = {}  # reason -> the regions refused for it, so a user knows which
        for n in names:
            if n in real.refuses:
                # one reason whatever a region's own numbers in it ('a dense 3x3 conv (input channels 64, ...)')
                named.setdefault(re.sub(r" \([^()]*\)", "", real.refuses[n]), []).append(n)
        ranked = sorted(named.items(), key=lambda kv: -len(kv[1]))
        top = "; ".join(f"{w} ({len(ns)}: {', '.join(ns[:3])}{f', +{len(ns) - 3} more' if len(ns) > 3 else ''})"
                        for w, ns in ranked[:3])
        if len(ranked) > 3:  # never a silent cut: how many reasons and regions the line leaves out
            rest = sum(len(ns) for _, ns in ranked[3:])
            top += f"; {len(ranked) - 3} other reason(s) for {rest} more ({', '.join(ranked[3][1][:2])}, ...)"
        line += (f"; not the rest: {top}" if top else "") + other_generators(real.chain)
    return line


def other_generators(asked: str) -> str:
    """'; ask another installed generator: --kernelgen triton': the real ones outside the ``asked`` chain
    that run here or would with a GPU (``runs_with_a_gpu``)."""
    from ..plugins.selection import runs_with_a_gpu
    from ..runtime import runtime

    chain = set(asked.split(","))
    names = [n for n, b in runtime().manager.backends.items()
             if "kernelgen" in b.info.roles and n not in chain and not b.info.simulated and runs_with_a_gpu(b)]
    return f"; ask another installed generator: {', '.join(f'--kernelgen {n}' for n in sorted(names))}" if names \
        else "; no other installed real kernel generator could run here or on a GPU (`ytk backends` says why)"


def not_worth_lines(r: ProposeReport, top: int) -> list[str]:
    fmt = _fmt(r.total_ms)
    rows = []
    for row in r.not_worth[:top]:
        sites = "—" if row.sites is None else f"{row.sites} site{'s' if row.sites != 1 else ''}"
        rows.append([row.label, sites, f"{fmt(row.ms)} ms", row.reason])
    return columns(["NOT WORTH PLUGGING", "", "", ""], rows, {1, 2})


def render(r: ProposeReport, console: Console, *, verbose: bool = False, top: int = 20) -> None:
    """Print the report the spec shows (and, with ``verbose``, the class/module tables and details)."""
    console.print(Text(header_text(r)), highlight=False)
    console.print()
    for line in plug_lines(r, top):
        console.print(Text(line), highlight=False, crop=False, overflow="ignore")
    hidden = len(r.proposals) - top
    if hidden > 0:
        console.print(Text(f"  ... {hidden} more row(s); raise --top to see them", style="dim"))
    console.print()
    asked = support_lines(r, top)
    for line in asked:
        console.print(Text(line), highlight=False, crop=False, overflow="ignore")
    if asked:
        console.print()
    for line in not_worth_lines(r, top):
        console.print(Text(line), highlight=False, crop=False, overflow="ignore")
    console.print()
    console.print(Text(r.summary), highlight=False)
    if verbose:
        _verbose(r, console, top)


def _verbose(r: ProposeReport, console: Console, top: int) -> None:
    word = engine_word(r.engine)
    fmt = _fmt(r.total_ms)
    console.print()
    t = _table([("BLOCK", "left"), ("INSTANCES", "right"), (f"{word} ms", "right"), ("%", "right")])
    t.title, t.title_justify = "time by torch class (inclusive: a block counts everything inside it)", "left"
    for c in r.class_table[:top]:
        t.add_row(c.cls, str(c.instances), fmt(c.ms), f"{100 * c.share:.1f}")
    console.print(t)
    t = _table([("MODULE", "left"), ("BLOCK", "left"), (f"{word} ms", "right"), ("%", "right")])
    t.title, t.title_justify = f"time by module (depth {max((m.depth for m in r.module_table), default=0)})", "left"
    for m in r.module_table:
        t.add_row("  " * m.depth + m.path, m.cls, fmt(m.ms), f"{100 * m.share:.1f}")
    console.print(t)
    for p in r.proposals[:top]:
        _detail(p, console, fmt)
    console.print()
    console.print(Text("unattributed glue by cause:", style="bold"))
    for g in r.glue:
        console.print(f"  {g.cause:<20} {fmt(g.ms):>8} ms  in {g.layers} layer(s)", highlight=False)
    glue_layers = sorted((ly for ly in r.layers if ly.glue_ms > 0), key=lambda ly: -ly.glue_ms)[:top]
    for ly in glue_layers:
        console.print(f"    {fmt(ly.glue_ms):>8} ms  {ly.name}", highlight=False)


def _detail(p: Proposal, console: Console, fmt) -> None:  # type: ignore[no-untyped-def]
    console.print()
    head = Text.assemble((p.name, "bold"), f"  {p.label}  {len(p.sites)} site(s)  {fmt(p.ms)} ms")
    console.print(head, highlight=False)
    if p.selector:
        console.print(f"  plug as    {p.selector}", highlight=False)
    if p.already_plugged:
        console.print(f"  to beat    {p.ms_to_beat:.3f} ms/site (measured now)", highlight=False)
        if p.kernelgen_input:
            console.print(f"  re-run     ytk kernelgen compile -r {p.kernelgen_input} -g <GPU> "
                          "--config deployment_target=tensorrt -o <out>.module_source.py", highlight=False)
        else:
            console.print("  re-run     (no kernel-generation input on record in plugins.json)", highlight=False)
    if p.dynamic:
        console.print(f"  families   {'; '.join(p.families)}", highlight=False)
    rf = p.roofline
    if rf is not None:
        console.print(f"  roofline   {rf.bytes / 1e6:.2f} MB + {rf.flops / 1e9:.3f} GFLOP -> {rf.bound_ms:.3f} ms "
                      f"{rf.limiter}-bound on {rf.gpu}; measured {rf.measured_ms:.3f} ms "
                      f"({100 * rf.fraction:.0f}% of roofline)", highlight=False)
    t = _table([("SITE", "left"), ("ms", "right"), ("input shapes", "left"), ("engine layers", "left")])
    for s in p.sites:
        shapes = " ".join("x".join(str(d) for d in sh) for sh in s.input_shapes[:3])
        layers = "; ".join(s.layers[:3]) + (f"; +{len(s.layers) - 3}" if len(s.layers) > 3 else "")
        t.add_row(s.module_path, f"{s.ms:.3f}", shapes, layers)
    console.print(t)

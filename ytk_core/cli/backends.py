"""``ytk backends``: every installed backend, its roles and stages, and whether it runs here."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from ytk_hookspecs.models import SELECTABLE_ROLES

from rich.markup import escape
from ..runtime import emit_json, runtime, stdout
from .app import app
from .options import JsonOpt


@app.command("backends")
def backends_cmd(
    arch: Annotated[str, typer.Option(
        "-a", "--arch", help="judge availability and the automatic choice for this target, as `ytk autoloop -a` "
                             "would (default 'auto': the local GPU, else the worked example's DRIVE AGX Orin, "
                             "the target every command's `-a auto` resolves to)")] = "auto",
    json_: JsonOpt = False,
) -> None:
    """List installed backends, their roles and stages, and their availability on this machine for a target."""
    from ..stages.inputs import parse_arch

    rt = runtime()
    mgr = rt.manager
    # Without a target, availability answered another question than every command asks (nvcc "yes" for
    # this host, then the autoloop's -a auto for the Orin picks mock): judge for the one -a auto means.
    why = ""
    if arch == "auto":
        from ..target import detect_arch

        arch, why = detect_arch()
    spec = parse_arch(arch)
    title = f"installed ytk backends for {spec.spec}" + (f" (-a auto: {why})" if why else "")
    rows = []
    for b in sorted(mgr.backends.values(), key=lambda b: b.name):
        av = b.availability(spec)
        rows.append({
            "name": b.name, "roles": list(b.info.roles), "stages": b.info.stages(),
            "distribution": b.distribution, "version": b.info.version, "simulated": b.info.simulated,
            "available": av.available, "reason": av.reason, "description": b.info.description,
        })
    # the autoloop's own choice, pairings included (a simulated generator builds with the simulated builder)
    from ..autoloop.run import choose_backends
    from ..autoloop.state import BackendChoice

    picks = choose_backends(spec.spec, BackendChoice(), keep_going=True)
    chosen = {role: picks[role][0] for role in SELECTABLE_ROLES}
    reasons = {role: picks[role][1] for role in SELECTABLE_ROLES}
    if json_:
        emit_json({"arch": spec.spec, "backends": rows, "selected": chosen,
                   "selection_reasons": reasons, "warnings": mgr.warnings})
        return
    t = Table(title=title, title_justify="left")
    for col in ("backend", "roles", "stages", "available", "why / notes", "distribution"):
        t.add_column(col)
    for r in rows:
        note = r["reason"] + (" [simulated target]" if r["simulated"] else "")
        t.add_row(r["name"], ", ".join(r["roles"]), ", ".join(r["stages"]),
                  "yes" if r["available"] else "no", escape(note), escape(r["distribution"] or ""))
    stdout.print(t)
    for role in SELECTABLE_ROLES:
        stdout.print(f"{role:>9}: {chosen[role] or '-'}  ({reasons[role]})", highlight=False, markup=False)
    for w in mgr.warnings:
        stdout.print(f"warning: {w}", highlight=False, markup=False)

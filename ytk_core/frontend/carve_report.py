"""The carve table prepare prints when it finishes."""

from __future__ import annotations

from rich.table import Table

from ytk_hookspecs.models import CandidatesFile, CarveResult

from ..runtime import stdout


def print_carve_table(result: CarveResult) -> None:
    cands = CandidatesFile.read(result.candidates)
    t = Table(title=f"carve: {result.custom_nodes} custom-op node(s) in {result.onnx}", title_justify="left")
    for col in ("plugin", "namespace", "sites", "lift", "inputs (site 0)", "outputs (site 0)", "kernelgen input"):
        t.add_column(col)
    for c in cands.candidates:
        s0 = c.sites[0]
        ins = ", ".join(f"{list(i.shape)}" for i, r in zip(s0.inputs, c.input_roles) if r == "activation")
        nw = sum(1 for r in c.input_roles if r != "activation")
        if nw:
            ins += f" + {nw} lifted weight(s)"
        t.add_row(c.name, c.namespace or "(empty)", str(len(c.sites)), c.lift, ins,
                  ", ".join(str(list(o.shape)) for o in s0.outputs), c.files.pt2 or "-")
    stdout.print(t)
    for c in cands.candidates:
        for n in c.notes:
            stdout.print(f"note ({c.name}): {n}", markup=False, highlight=False)

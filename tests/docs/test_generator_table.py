"""docs/byom.md's table of what each installed generator can build names every kernel generator ytk loads
here (gaia was missing from it)."""

from __future__ import annotations

from tests.conftest import REPO


def test_the_byom_generator_table_names_every_installed_kernel_generator(ytk):
    backends = ytk("backends", "--json").json()["backends"]
    gens = {b["name"] for b in backends if "kernelgen" in b["roles"]}
    assert {"mock", "templates"} <= gens
    doc = (REPO / "docs" / "byom.md").read_text()
    table = doc[doc.index("### What each installed generator can build"):]
    table = table[:table.index("\n\n", table.index("| generator |"))]
    rows = {line.split("|")[1].strip().split()[0].strip("`") for line in table.splitlines()
            if line.startswith("| `")}
    assert gens <= rows, f"installed but not in byom.md's table: {sorted(gens - rows)}"

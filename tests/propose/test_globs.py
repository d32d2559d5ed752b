"""@where globs: exactly the family's sites among all modules of the class, and readable."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ytk_core.propose.globs import select, synthesize, where_matches
from ytk_core.propose.modules import ModuleIndex, load_fx_nodes


@pytest.fixture(scope="module")
def mods(worked):  # type: ignore[no-untyped-def]
    return ModuleIndex(load_fx_nodes(worked / "fx_nodes.json"))


def test_spec_shaped_globs(mods):
    lite = mods.instances("LiteMLA")
    s2 = [p for p in lite if ".stages.2." in p]
    assert synthesize(s2, lite) == ["*.2.blocks.*.context_module.main"]
    cna = mods.instances("ConvNormAct")
    dyn = ["m.input_stem.res0.main.depth_conv", "m.stages.0.blocks.1.main.depth_conv"] + \
        [p for p in cna if p.endswith("local_module.main.depth_conv")]
    globs = synthesize(dyn, cna)
    assert "*.local_module.main.depth_conv" in globs and len(globs) == 3
    assert select(cna, globs) == sorted(dyn)


def test_globs_name_the_module_not_just_an_index(mods):
    convs = mods.instances("Conv2d")
    five = [p for p in convs if p.endswith("aggreg.0.0")]
    assert synthesize(five, convs) == ["*.aggreg.0.0"]


def test_whole_universe_needs_no_where(mods):
    lite = mods.instances("LiteMLA")
    assert synthesize(lite, lite) == []


def test_exclusion_semantics():
    assert where_matches("m.a.1.x", ["*.x", "!*.1.x"]) is False
    assert where_matches("m.a.2.x", ["*.x", "!*.1.x"]) is True
    assert where_matches("m.a.2.x", ["!*.1.x"]) is True


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_synthesized_globs_select_exactly_the_targets(mods, data):
    universe = mods.instances(data.draw(st.sampled_from(["ConvNormAct", "Conv2d", "LiteMLA", "ResidualBlock"])))
    targets = data.draw(st.lists(st.sampled_from(universe), min_size=1, unique=True))
    globs = synthesize(targets, universe)
    assert select(universe, globs) == sorted(set(targets))


_ODD = st.text(alphabet=st.sampled_from(list("ab01;\"'*?[]!@, \t-:é")), min_size=1, max_size=4)


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_any_module_name_gives_a_selector_that_parses_and_selects_exactly(data):
    """ModuleDict keys may hold any character but '.': the globs for them must survive the selector
    grammar (once 'a;b' made propose's own selector unparsable, so carve refused every such site)."""
    from ytk_core.frontend.selectors import parse_selector

    names = data.draw(st.lists(_ODD, min_size=2, max_size=6, unique=True))
    universe = sorted({f"m.blocks.{n}" for n in names} | {f"m.other.{n}.conv" for n in names})
    targets = data.draw(st.lists(st.sampled_from(universe), min_size=1, max_size=len(universe) - 1, unique=True))
    globs = synthesize(targets, universe)
    sel = parse_selector(f"yasp::X=Conv2d@where={','.join(globs)}")
    assert list(sel.where) == globs
    # exact, unless two paths differ only where a selector cannot hold the character ('?' stands in)
    assert select(universe, sel.where) == sorted(targets) or any(c in "@, \t" for t in targets for c in t)


def test_a_semicolon_key_is_named_exactly():
    universe = ["m.blocks.a;b", "m.blocks.c;d", "m.blocks.a*b"]
    assert synthesize(["m.blocks.a;b"], universe) == ["*.a;b"]
    assert synthesize(["m.blocks.a*b"], universe) == ["*.a[*]b"]

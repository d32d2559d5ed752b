"""The selector grammar: every form of the spec, errors that point at the column, no tracebacks ever."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ytk_core.frontend.selectors import SelectorError, parse_selector

SPEC_SELECTORS = [
    "yasp::LiteMLAC384=LiteMLA:around@where=*m.stages.2.blocks.*.context_module.main",
    "yasp::DwConv3x3s1Dyn=ConvNormAct@where=*.0.blocks.1.main.depth_conv,*.local_module.main.depth_conv,"
    "*.res0.main.depth_conv",
    "yasp::DwConv5x5s1C384=Conv2d@where=*m.stages.2.blocks.*.context_module.main.aggreg.0.0",
]


@pytest.mark.parametrize("text", SPEC_SELECTORS)
def test_spec_selectors_parse(text):
    s = parse_selector(text)
    assert s.namespace == "yasp" and s.kind == "class" and s.where


def test_all_parts():
    s = parse_selector("abc::X=LiteMLA:around@nojoin@where=*a*,!*b*@lift=none")
    assert (s.namespace, s.name, s.ops_name, s.around, s.nojoin, s.lift) == ("abc", "X", "LiteMLA", True, True, "none")
    assert s.includes == ("*a*",) and s.excludes == ("*b*",)
    assert parse_selector("::X=Conv2d").namespace == ""
    assert parse_selector("X=Conv2d").namespace == "yasp"
    assert parse_selector("X=Conv2d@lift=fold_conv_bn_seq").lift == "fold_conv_bn_seq"


@pytest.mark.parametrize("text, kind, check", [
    ("A=call:torch.matmul", "call", lambda s: s.call_target == "torch.matmul"),
    ("A=conv2d_1...relu_3", "span", lambda s: s.span == ("conv2d_1", "relu_3")),
    ("A=a.b...c", "span", lambda s: s.span == ("a.b", "c")),
    ("A=conv2d_1,relu_2,add", "nodes", lambda s: s.nodes == ("conv2d_1", "relu_2", "add")),
    ("A=mod:aggreg.0.0", "mod", lambda s: s.mod_suffix == "aggreg.0.0"),
])
def test_escape_hatches(text, kind, check):
    s = parse_selector(text)
    assert s.kind == kind and check(s)


@pytest.mark.parametrize("text, col, expected", [
    ("yasp::=X", 7, "plugin name"),
    ("yasp::A", 8, "'='"),
    ("A=B:arond", 4, "':around'"),
    ("A=B@lift=foo", 10, "lift mode"),
    ("A=B@nojoin", 4, "only together with :around"),
    ("A=B@bogus", 5, "a modifier"),
    ("A=B@lift=none@lift=none", 14, "@lift only once"),
    ("A=B@where=*.a@where=*.b", 14, "@where only once: put every glob in one @where="),
    ("A=", 3, "a region"),
    ("A=m.x.y", 3, "no dots"),
    ("1A=B", 1, "plugin name"),
    (" A=B", 1, "whitespace"),
])
def test_errors_quote_and_point(text, col, expected):
    with pytest.raises(SelectorError) as ei:
        parse_selector(text)
    msg = ei.value.render()
    assert f"column {col}" in msg and expected in msg and text in msg
    caret = [line for line in msg.splitlines() if line.strip() == "^"][0]
    assert caret.index("^") - 4 == col - 1


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=60))
def test_no_input_produces_a_traceback(text):
    try:
        parse_selector(text)
    except SelectorError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="yasp:=ABC_.,!*@wherliftonjfd0123-[]", max_size=50))
def test_grammar_alphabet_never_crashes(text):
    try:
        s = parse_selector(text)
        assert s.name and s.kind in ("class", "call", "span", "nodes", "mod")
    except SelectorError:
        pass

"""Issue 29, item 6: a fuzz test per parser. Whatever text comes in, only the project's own error
types escape (UsageError/StageError subclasses, ArtifactError, or the parser's documented error);
never a KeyError, ZeroDivisionError, MemoryError, RecursionError or a traceback. Each runs in a few
seconds (max_examples 200) so CI stays fast."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ytk_hookspecs.errors import StageError
from ytk_hookspecs.kernel_source import KernelSource, KernelSourceError
from ytk_hookspecs.models import ArchSpec, ArchSpecError, ArtifactError
from ytk_hookspecs import shape_expr
from ytk_core.bundle import read_manifest
from pathlib import Path

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)

# Text built from the parsers' own alphabets, so examples get past the first character.
SELECTOR_ALPHA = st.sampled_from(list("yasp::Lite=MLA:around@where=*.,0123[]()-_ ") + [
    "::", "@where=", "@lift=", "@nojoin", ":around", "yasp::", "Conv2d", "*m.stages.2", ",", "\x00", "é"])
EXPR_ALPHA = st.sampled_from(list("0123456789+-*/()[], ") + ["in0", "in1", "out0", "cdiv", "max", "min", "//",
                                                              "H", "W", "in0[2]", "0", "**", "lambda", "\x00"])
ARCH_ALPHA = st.sampled_from(list("-0123456789") + ["arm64", "x86_64", "sm", "sm87", "dos", "dos6010", "cu",
                                                    "cu114", "trt", "trt86", "jp", "l4t", "linux", "é"])


def _joined(alpha, max_size=40):
    return st.lists(alpha, max_size=max_size).map("".join)


@FUZZ
@given(st.one_of(_joined(SELECTOR_ALPHA), st.text(max_size=60)))
def test_fuzz_selector(text):
    from ytk_core.frontend.selectors import parse_selector

    try:
        parse_selector(text)
    except StageError:  # SelectorError is a UsageError
        pass


@FUZZ
@given(st.one_of(_joined(ARCH_ALPHA, 12), st.text(max_size=40)))
def test_fuzz_arch_spec(text):
    try:
        ArchSpec.parse(text)
    except ArchSpecError:
        pass


@FUZZ
@given(st.one_of(_joined(EXPR_ALPHA), st.text(max_size=40)),
       st.lists(st.lists(st.integers(-3, 64), max_size=4), max_size=3),
       st.dictionaries(st.sampled_from(["H", "W", "C"]), st.integers(-3, 64)))
def test_fuzz_shape_expr(text, shapes, extents):
    try:
        shape_expr.evaluate(text, shapes, extents)
    except shape_expr.ShapeExprError:
        pass


def test_shape_expr_crafted():
    """The crafted expressions that once escaped as ZeroDivisionError, MemoryError, RecursionError."""
    for text in ["in0[0]//0", "cdiv(4, 0)", "1+" * 500_000 + "1", "(" * 300 + "1" + ")" * 300,
                 "-" * 990 + "1", "in0[True]", "inx[0]", "1\x002", "9" * 5000]:
        try:
            shape_expr.evaluate(text, [[1, 2, 3, 4]])
        except shape_expr.ShapeExprError:
            pass


_META = ("plugin_name: P\nplugin_namespace: yasp\nplugin_version: '1'\n")


@FUZZ
@given(st.one_of(
    st.text(max_size=200),
    st.tuples(st.sampled_from(["CUDA_HEADER", "CUDA_SOURCE", "PLUGIN_META_YAML", "GENERATOR", "x"]),
              st.text(max_size=60)).map(lambda t: f"{t[0]} = {t[1]!r}\n"),
    st.lists(st.sampled_from(["CUDA_HEADER = ''\n", "CUDA_SOURCE = ''\n", f"PLUGIN_META_YAML = {_META!r}\n",
                              "PLUGIN_META_YAML = '[[[['\n", "PLUGIN_META_YAML = 'a: *b'\n", "(((", "\x00",
                              "PLUGIN_META_YAML = 'inputs: nope'\n"]), max_size=5).map("".join)))
def test_fuzz_kernel_source(text):
    try:
        KernelSource.parse(text)
    except KernelSourceError:
        pass


def test_kernel_source_crafted(tmp_path):
    for i, data in enumerate([b"CUDA_HEADER = '\xff'\n", ("x = " + "1+" * 500_000 + "1\n").encode(),
                              ("x = " + "[" * 100_000 + "\n").encode(), ("x = " + "-" * 200_000 + "1\n").encode(),
                              b"PLUGIN_META_YAML = '" + b"[" * 50_000 + b"'\n",
                              # an integer of 100,000 digits (past Python's int-from-str limit) in a shape
                              b"CUDA_HEADER=''\nCUDA_SOURCE=''\nPLUGIN_META_YAML='plugin_name: x\\ninputs:\\n"
                              b"- {name: a, dtype: float16, shape: [" + b"9" * 100_000 + b"]}\\n'\n"]):
        p = tmp_path / f"{i}.module_source.py"
        p.write_bytes(data)
        try:
            KernelSource.read(p)
        except KernelSourceError:
            pass


JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
                       lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                       max_leaves=12)


@FUZZ
@given(st.one_of(
    st.binary(max_size=80),
    JSONISH.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries({"arch": JSONISH, "precision": JSONISH, "members": JSONISH, "simulated": JSONISH},
                          optional={"schema_version": JSONISH, "plugins": JSONISH})
        .map(lambda v: json.dumps(v).encode()),
))
def test_fuzz_bundle_manifest(data):
    try:
        read_manifest(Path("b.tgz"), data)
    except ArtifactError:
        pass

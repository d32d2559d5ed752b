"""The debug-taps table's Boundary column names each site: two sites of one plugin once both read
'Att input 0', so a user could not tell which one drifted."""

from __future__ import annotations

import numpy as np

from ytk_core.stages.numerics import tolerance_for
from ytk_core.stages.taps import Tap, TapsFile, judge


def _tap(tensor: str, plugin: str, node: str, order: int, io: str) -> Tap:
    return Tap(tensor=tensor, plugin=plugin, onnx_node=node, node_order=order, io=io, index=0)


def test_two_sites_of_one_plugin_are_told_apart_in_graph_order():
    taps = TapsFile(onnx="m.onnx", taps=[
        _tap("a_in", "Att", "n_att_b", 0, "input"), _tap("a_out", "Att", "n_att_b", 0, "output"),
        _tap("d_out", "Dw", "n_dw", 1, "output"),
        _tap("b_in", "Att", "n_att_a", 2, "input"), _tap("b_out", "Att", "n_att_a", 2, "output")])
    ref = {t.tensor: np.ones((2, 3), np.float32) for t in taps.taps}
    v = judge("engine", taps, ref, dict(ref), tolerance_for("fp16"))
    assert v.boundaries == ["Att #1 input 0", "Att #1 output 0", "Dw output 0", "Att #2 input 0", "Att #2 output 0"]
    assert v.plugin is None


def test_a_tensor_between_two_plugins_is_one_boundary_and_a_drift_before_both_blames_neither():
    """A -> B with A's output tapped as B's input too (as add_taps records it): listed once, and a drift that is
    already in A's input is the engine's own layers' doing, not B's."""
    taps = TapsFile(onnx="m.onnx", taps=[
        _tap("x", "A", "n_a", 0, "input"), _tap("mid", "A", "n_a", 0, "output"),
        _tap("mid", "B", "n_b", 1, "input"), _tap("y", "B", "n_b", 1, "output")])
    ref = {k: np.linspace(1, 2, 6, dtype=np.float32).reshape(2, 3) for k in ("x", "mid", "y")}
    tol = tolerance_for("fp16")
    v = judge("engine", taps, ref, {k: a * 1.05 + 0.05 for k, a in ref.items()}, tol)
    assert v.plugin is None and "no plugin is to blame" in v.reason and "x" in v.reason
    assert v.boundaries == ["A input 0", "A output 0", "B output 0"]
    v = judge("engine", taps, ref, {**ref, "y": ref["y"] * 1.05}, tol)
    assert v.plugin == "B" and v.good_input == "mid"

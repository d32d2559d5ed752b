"""The autoloop's --roofline: what a generator would take but the roofline rule leaves out is named in the
stop reason with the flag that lets the loop try it; the limit is kept in the state and checked."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ytk_core.autoloop.proposals import _nothing_to_try
from ytk_core.autoloop.state import AutoloopLimits
from ytk_core.errors import UsageError
from ytk_core.propose.models import NotWorthRow


def _ws(roofline: float):  # type: ignore[no-untyped-def]
    return SimpleNamespace(limits=AutoloopLimits(max_rounds=2, min_gain_ms=0.1, roofline=roofline),
                           state=SimpleNamespace(min_gain_label=lambda: "0.1ms"))


def _row(label: str, supported: bool | None) -> NotWorthRow:
    return NotWorthRow(label=label, category="roofline", sites=4, ms=2.0, reason="at roofline", supported=supported)


def test_a_taker_left_out_as_at_roofline_is_named_with_the_flag() -> None:
    refused = [SimpleNamespace(supported=False)]  # the generator refuses what propose lists
    report = SimpleNamespace(not_worth=[_row("depthwise 7x7 s1 (C=96)", True), _row("gemm 96x384", False)],
                             proposals=refused)
    why = _nothing_to_try(_ws(0.5), [], [], report)
    assert why.startswith("no candidate left to try")
    assert "would take depthwise 7x7 s1 (C=96), left out as at roofline by --roofline 0.5" in why
    assert "--roofline 1 lets the loop try them" in why and "gemm" not in why
    # no taker among them, or the rule already off: nothing more to say
    assert "roofline" not in _nothing_to_try(_ws(0.5), [], [], SimpleNamespace(not_worth=[_row("gemm", False)],
                                                                               proposals=refused))
    assert "roofline" not in _nothing_to_try(_ws(1.0), [], [], report)
    # a generator that takes every proposal (the mock) is no generator of hidden families: no line
    takes_all = SimpleNamespace(not_worth=report.not_worth, proposals=[SimpleNamespace(supported=True)])
    assert "roofline" not in _nothing_to_try(_ws(0.5), [], [], takes_all)


def test_the_roofline_limit_is_checked_and_old_states_read() -> None:
    assert AutoloopLimits.model_validate({"max_rounds": 2, "min_gain_ms": 0.1}).roofline == 0.5
    with pytest.raises(ValueError):
        AutoloopLimits(max_rounds=2, roofline=0)
    from ytk_core.autoloop.run import run_autoloop
    from ytk_core.autoloop.state import BackendChoice

    with pytest.raises(UsageError, match="--roofline is a fraction of the roofline bound in"):
        run_autoloop(__file__, "auto", "fp16", "/nonexistent-workdir", BackendChoice(), 1, "1%", 1, None,
                     roofline=1.5)


def test_the_last_stop_names_what_lies_under_the_minimum_gain() -> None:
    """A trial's Swin stopped with "no candidate left to try" while 8 sites sat under the threshold."""
    small = NotWorthRow(label="families under 0.1 ms", category="under_threshold", sites=8, ms=0.083,
                        reason="a kernelgen run cannot repay this")
    why = _nothing_to_try(_ws(0.5), [], [], SimpleNamespace(not_worth=[small], proposals=[], candidates=[1]))
    assert why == ("no candidate left to try (every proposal is plugged already or was dropped earlier); 8 more "
                   "sites (0.083 ms) lie under --min-gain-ms 0.1ms")
    assert _nothing_to_try(_ws(0.5), [], [], SimpleNamespace(not_worth=[], proposals=[], candidates=[1])).endswith(
        "dropped earlier)")


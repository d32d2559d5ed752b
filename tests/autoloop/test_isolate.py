"""Pinning a carve failure that names no candidate on the candidate to blame, and one-line reasons."""

from __future__ import annotations

import errno

import pytest

from ytk_core.autoloop.isolate import describe, find_culprits, must_stop, named_selector
from ytk_core.autoloop.state import CarveFailure
from ytk_core.errors import BackendError, RegionRefused, UsageError


def _search(cands: list[str], fails, first_failure: CarveFailure | None = None):  # type: ignore[no-untyped-def]
    """find_culprits over plain strings (a candidate is its own selector); ``fails(group)`` -> failure or None."""
    carves: list[list[str]] = []

    def carve(group: list[str]) -> CarveFailure | None:
        carves.append(list(group))
        return fails(group)

    culprits = find_culprits(cands, first_failure or fails(cands), carve, lambda c: c)
    return culprits, carves


def _unnamed(why: str) -> CarveFailure:
    return CarveFailure(message=why)


@pytest.mark.parametrize("bad", list("abcdefgh"))
def test_one_bad_candidate_among_eight_costs_three_carves(bad):
    culprits, carves = _search(list("abcdefgh"), lambda g: _unnamed(f"broke on {bad}") if bad in g else None)
    assert [c.candidate for c in culprits] == [bad] and culprits[0].failure.message == f"broke on {bad}"
    assert not culprits[0].alongside
    assert len(carves) <= 6 and [bad] in carves  # halves down to the one: at most two carves per level


def test_a_failure_naming_a_candidate_convicts_it_at_once():
    fail = CarveFailure(message="region contains 5 convolutions", selector="c")
    culprits, carves = _search(list("abcd"), lambda g: None, fail)
    assert [c.candidate for c in culprits] == ["c"] and carves == []


def test_a_half_failure_naming_a_candidate_stops_the_search_there():
    def fails(group):  # type: ignore[no-untyped-def]
        return CarveFailure(message="refused", selector="f") if "f" in group else None

    culprits, carves = _search(list("abcdefgh"), fails, _unnamed("something broke"))
    assert [c.candidate for c in culprits] == ["f"] and len(carves) == 2  # first half carves, second names f


def test_two_candidates_that_only_fail_together():
    """b and g each carve alone (or with any others) but not both: the one that joins second is blamed,
    and the reason says alongside whom."""
    culprits, carves = _search(list("abcdefgh"), lambda g: _unnamed("overlap") if {"b", "g"} <= set(g) else None)
    assert [c.candidate for c in culprits] == ["g"]
    assert culprits[0].alongside == list("abcdef")


def test_every_candidate_bad_blames_the_first_half_first():
    culprits, _ = _search(list("abcd"), lambda g: _unnamed("no"))
    assert [c.candidate for c in culprits] == ["a"]


def test_describe_is_one_line_and_names_unexpected_types():
    assert describe(KeyError("conv_3")) == "KeyError: 'conv_3'"
    assert describe(RuntimeError()) == "RuntimeError"
    assert describe(UsageError("2 plugin problem(s):\n  - A is wrong\n  - B is wrong")) == \
        "2 plugin problem(s): - A is wrong - B is wrong"
    long = describe(BackendError("x" * 1000))
    assert len(long) == 400 and long.endswith("...")


def test_named_selector():
    sels = ["yasp::A=Conv@where=*.0.dw", "yasp::A2=Conv@where=*.0.dw2"]
    assert named_selector(RegionRefused(sels[0], "carve", "no"), sels) == sels[0]
    # a message that quotes a selector is not data: the culprit search decides, not a substring match
    assert named_selector(UsageError(f"selector {sels[1]!r}: region has 2 outputs"), sels) is None
    assert named_selector(RegionRefused("yasp::Other=Z", "carve", "no"), sels) is None  # not one of this carve's
    from ytk_core.frontend.selectors import parse_selector, SelectorError
    try:
        parse_selector("yasp::Bad=X@nojoin")
    except SelectorError as e:
        assert named_selector(e, ["yasp::Bad=X@nojoin"]) == "yasp::Bad=X@nojoin"
    else:
        raise AssertionError("a malformed selector parsed")
    assert named_selector(UsageError("internal carve error: values were not produced"), sels) is None
    assert named_selector(KeyError(sels[0]), sels) is None  # only the carve's own errors are read for a name


def test_must_stop_on_a_full_disk_only():
    assert must_stop(OSError(errno.ENOSPC, "No space left on device"))
    assert not must_stop(OSError(errno.ENOENT, "missing")) and not must_stop(KeyError("x"))

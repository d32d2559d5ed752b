"""Scoring checks every variant on one case per shape, times those that pass, then checks the fastest on
all other cases in order of time until one passes. Every variant on every case once cost most of a cold
kernel generation on the GPU (2.5 to 6 s a variant at full size); here the GPU parts are stand-ins."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ytk_backend_templates import scoring
from ytk_backend_templates.harness import CheckResult, SiteTiming

#: variant -> the cases (labels) it fails, and its time
VARIANTS = {"fast_wrong_on_large": ({"shape0/large"}, 1.0), "second": (set(), 2.0), "third": (set(), 3.0),
            "wrong_everywhere": ({"shape0/normal0", "shape0/large"}, 0.5)}


def _stub_gpu(monkeypatch, fails, ms):  # type: ignore[no-untyped-def]
    """Stand-ins for loading, checking and timing: ``fails(variant)`` the case labels it fails, ``ms(variant,
    site)`` its time. Returns the (variant, case) checks made, and the build outcome to score."""
    checked: list[tuple[str, str]] = []

    def check_case(lib, case, device, **kw):  # type: ignore[no-untyped-def]
        checked.append((lib.name, case.label))
        bad = case.label in fails(lib.name)
        return CheckResult(ok=not bad, max_abs_err=1.0 if bad else 0.0, problems=[f"{case.label} wrong"] if bad else [])

    monkeypatch.setattr(scoring, "check_case", check_case)
    monkeypatch.setattr(scoring, "LauncherLibrary", lambda path, **kw: SimpleNamespace(name=path))
    monkeypatch.setattr(scoring, "time_kernel", lambda lib, region, site, *a: SiteTiming(ms(lib.name, site), 0.0, 0.1,
                                                                                          True))
    return checked, SimpleNamespace(library_of=lambda v: SimpleNamespace(path=v.name), error_of=lambda v: "")


def _variants(names):  # type: ignore[no-untyped-def]
    return [SimpleNamespace(name=n, params={}, launcher="l", workspace=None) for n in names]


def _run(monkeypatch, variants):  # type: ignore[no-untyped-def]
    checked, built = _stub_gpu(monkeypatch, lambda v: VARIANTS[v][0], lambda v, site: VARIANTS[v][1])
    cases = [SimpleNamespace(shape_index=0, label=lab) for lab in ("shape0/normal0", "shape0/normal1", "shape0/large")]
    shapes = [SimpleNamespace(inputs=[(1, 2)])]
    return scoring.score_variants(_variants(variants), built, SimpleNamespace(), shapes, cases, "cpu", 1.0, 1,
                                  [0]), checked


def test_only_the_fastest_are_checked_on_every_case(monkeypatch):  # type: ignore[no-untyped-def]
    scored, checked = _run(monkeypatch, list(VARIANTS))
    by = {s.variant.name: s for s in scored}
    assert scoring.pick_winner(scored) is by["second"]
    assert by["wrong_everywhere"].score.correct is False and by["wrong_everywhere"].total_ms is None
    assert not by["wrong_everywhere"].score.time_ms_per_site  # failed the screen: never timed
    assert by["fast_wrong_on_large"].score.correct is False and "shape0/large wrong" in by[
        "fast_wrong_on_large"].score.rejected
    assert by["third"].score.correct is None and by["third"].score.note == \
        "checked on 1 of 3 cases: slower than the winner"
    assert [c for c in checked if c[0] == "third"] == [("third", "shape0/normal0")]
    assert len(checked) == 4 + 2 + 2  # the screen of all four, the rest for the two fastest that passed it


@pytest.mark.parametrize("only, correct", [("third", True), ("fast_wrong_on_large", False)])
def test_one_variant_is_checked_on_every_case(monkeypatch, only, correct):  # type: ignore[no-untyped-def]
    scored, checked = _run(monkeypatch, [only])
    assert checked == [(only, "shape0/normal0"), (only, "shape0/normal1"), (only, "shape0/large")]
    assert scored[0].score.correct is correct
    assert scoring.pick_winner(scored) is (scored[0] if correct else None)


def test_each_shapes_fastest_is_checked_before_a_dispatch_is_built(monkeypatch):  # type: ignore[no-untyped-def]
    """With two site shapes, the variant fastest on each shape is a part of the per-shape dispatch: it is
    checked on every case even when slower than the winner in total, and one that fails is rejected, so the
    next fastest on that shape is checked in its place."""
    # variant -> the cases it fails, its time on shape 0 and on shape 1
    table = {"best_total": (set(), 1.0, 5.0), "best_on_1_wrong": ({"shape1/large"}, 9.0, 1.0),
             "next_on_1": (set(), 9.5, 2.0), "slow": (set(), 10.0, 10.0)}
    checked, built = _stub_gpu(monkeypatch, lambda v: table[v][0], lambda v, site: table[v][1 + site.which])
    cases = [SimpleNamespace(shape_index=i, label=f"shape{i}/{k}") for i in (0, 1) for k in ("normal0", "large")]
    shapes = [SimpleNamespace(inputs=[(1, 2)], count=1, which=i) for i in (0, 1)]
    scored = scoring.score_variants(_variants(table), built, SimpleNamespace(), shapes, cases, "cpu", 1.0, 1, [0, 1])
    by = {s.variant.name: s for s in scored}
    assert scoring.pick_winner(scored) is by["best_total"]
    assert by["best_on_1_wrong"].score.correct is False and by["best_on_1_wrong"].total_ms is None
    assert by["next_on_1"].score.correct is True and by["next_on_1"].score.note is None
    assert by["slow"].score.correct is None and by["slow"].score.note.startswith("checked on 2 of 4 cases")
    assert not [c for c in checked if c[0] == "slow" and c[1].endswith("large")]
    from ytk_backend_templates.dispatch import per_shape_winners
    winners, _ = per_shape_winners(scored, [1, 1])
    assert [w.variant.name for w in winners] == ["best_total", "next_on_1"]


def test_a_shapes_fastest_is_not_checked_when_no_dispatch_would_pay(monkeypatch):  # type: ignore[no-untyped-def]
    table = {"best_total": (set(), 1.0, 2.0), "best_on_1": (set(), 9.0, 1.99)}  # a dispatch would save 0.3%
    checked, built = _stub_gpu(monkeypatch, lambda v: table[v][0], lambda v, site: table[v][1 + site.which])
    cases = [SimpleNamespace(shape_index=i, label=f"shape{i}/{k}") for i in (0, 1) for k in ("normal0", "large")]
    shapes = [SimpleNamespace(inputs=[(1, 2)], count=1, which=i) for i in (0, 1)]
    scored = scoring.score_variants(_variants(table), built, SimpleNamespace(), shapes, cases, "cpu", 1.0, 1, [0, 1])
    by = {s.variant.name: s for s in scored}
    assert by["best_total"].score.correct is True and by["best_on_1"].score.correct is None
    assert not [c for c in checked if c[0] == "best_on_1" and c[1].endswith("large")]

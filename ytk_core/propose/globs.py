"""``@where=`` globs that select exactly a family's sites among all modules of its class.

Candidates are the readable shapes the spec uses: a path suffix (``*.local_module.main.depth_conv``),
optionally with block indices wildcarded (``*.2.blocks.*.context_module.main``). A greedy cover
picks the fewest, shortest globs that match every site and no other instance of the class; exact
paths are always valid candidates, so a cover always exists.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from fnmatch import fnmatchcase, translate
from functools import lru_cache


def where_matches(path: str, globs: list[str] | tuple[str, ...]) -> bool:
    """The selector semantics: any positive glob matches and no ``!`` glob does."""
    pos = [g for g in globs if not g.startswith("!")]
    neg = [g[1:] for g in globs if g.startswith("!")]
    if pos and not any(fnmatchcase(path, g) for g in pos):
        return False
    return not any(fnmatchcase(path, g) for g in neg)


def select(universe: list[str], globs: list[str] | tuple[str, ...]) -> list[str]:
    """The members of ``universe`` a glob list selects (all of them for an empty list)."""
    return [p for p in universe if where_matches(p, globs)] if globs else list(universe)


def _candidates(path: str) -> list[str]:
    parts = path.split(".")
    out: list[str] = []
    # A glob must name the module, not just its index: "*.aggreg.0.0", never "*.0".
    named = max((k for k, c in enumerate(parts) if not c.isdigit()), default=0)
    for i in range(named + 1):
        suffix = parts[i:]
        variants = [suffix]
        numeric = [j for j, c in enumerate(suffix[:-1]) if c.isdigit()]
        for j in numeric:
            variants.append([("*" if k == j else c) for k, c in enumerate(suffix)])
        if len(numeric) > 1:
            variants.append([("*" if k in numeric else c) for k, c in enumerate(suffix)])
        for v in variants:
            out.append(("*." if i > 0 else "") + ".".join(v))
    return out


@lru_cache(maxsize=4096)
def _matcher(glob: str) -> Callable[[str], bool]:
    """fnmatch semantics; the common ``*.a.b`` form as a plain suffix test (no regex to build)."""
    if glob.startswith("*") and not any(c in glob[1:] for c in "*?["):
        tail = glob[1:]
        return lambda p: p.endswith(tail)
    if not any(c in glob for c in "*?["):
        return lambda p: p == glob
    rx = re.compile(translate(glob))
    return lambda p: rx.match(p) is not None


def synthesize(targets: list[str], universe: list[str]) -> list[str]:
    """Globs selecting exactly ``targets`` from ``universe`` (empty when targets are the whole universe)."""
    want = set(targets)
    every = set(universe) | want
    if want == every:
        return []
    cover: dict[str, frozenset[str]] = {}
    for t in sorted(want):
        for g in _candidates(t):
            if g in cover:
                continue
            hit = frozenset(p for p in every if _matcher(g)(p))
            if hit <= want:
                cover[g] = hit
    chosen: list[str] = []
    left = set(want)
    while left:
        best = max(cover, key=lambda g: (len(cover[g] & left), -len(g), -g.count("*")))
        if not cover[best] & left:
            break
        chosen.append(best)
        left -= cover[best]
    assert not left, "exact paths always cover their own targets"
    # Keep the order stable and readable: by first site in path order.
    return sorted(chosen, key=lambda g: min(sorted(cover[g])))

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


def escape(part: str) -> str:
    """One module-path component as a glob that matches it: fnmatch's specials in brackets, and the few
    characters a selector cannot hold ('@', ',', whitespace) as '?' (a glob's leading '!': see _candidates)."""
    return "".join(f"[{c}]" if c in "*?[" else "?" if c in "@," or c.isspace() else c for c in part)


def _candidates(path: str) -> list[str]:
    parts = [escape(c) for c in path.split(".")]
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
    # a leading '!' would make the glob an exclusion
    return ["?" + g[1:] if g.startswith("!") else g for g in out]


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
    while left and cover:
        best = max(cover, key=lambda g: (len(cover[g] & left), -len(g), -g.count("*")))
        if not cover[best] & left:
            break
        chosen.append(best)
        left -= cover[best]
    if left:
        # Only where two paths differ by nothing but characters a selector cannot hold (escape's '?'):
        # name the rest by their own escaped paths, the closest a selector can come.
        chosen += sorted(_candidates(t)[0] for t in left)  # [0]: the whole path, no index wildcarded
        cover.update({g: frozenset(p for p in every if _matcher(g)(p)) for g in chosen if g not in cover})
    # Keep the order stable and readable: by first site in path order.
    return sorted(chosen, key=lambda g: min(sorted(cover[g])))

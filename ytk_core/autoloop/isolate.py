"""One bad candidate must not sink a round: say in one line why it failed, and find it when the failure
does not name it.

A carve (or engine compile) runs every candidate of a round at once, so its error may belong to any
of them. When the error names a selector the loop drops that candidate; when it does not, the search
below carves smaller groups until each failure is pinned on one candidate, or on one candidate that
cannot join the others.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from ytk_hookspecs.errors import StageError

from .state import CarveFailure

#: A drop reason is one line of the report; the full text stays in the debug log.
MAX_REASON = 400

T = TypeVar("T")


def describe(err: BaseException) -> str:
    """One line for a drop reason or a stop message: a ytk error's own message (its lines joined), anything
    else (a bug in a backend) prefixed by its type, as ``KeyError: 'conv'``."""
    text = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
    if not isinstance(err, StageError):
        text = f"{type(err).__name__}: {text}" if text else type(err).__name__
    return one_line(text)


def one_line(text: str) -> str:
    """``text`` as one line of a drop reason: its lines joined, cut at MAX_REASON characters."""
    text = " ".join(line.strip() for line in text.splitlines() if line.strip())
    return text if len(text) <= MAX_REASON else text[:MAX_REASON - 3] + "..."


def must_stop(err: BaseException) -> bool:
    """Errors that would fail every candidate the same way (the disk or memory is full): the loop stops
    on them instead of dropping a candidate that is not to blame."""
    return (isinstance(err, MemoryError) or (isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT))
            or getattr(err, "stops_the_loop", False))


def named_selector(err: BaseException, selectors: Sequence[str]) -> str | None:
    """The selector an error is about, as the error carries it (``RegionRefused.selector``,
    ``SelectorError.selector``: the carve wraps every refusal of one selector so), when it is one of
    ``selectors``. None when the error names none -- the round then carves parts to find the culprit,
    never guessing from the message's text."""
    sel = getattr(err, "selector", None)
    return sel if isinstance(sel, str) and sel in selectors else None


@dataclass
class Culprit(Generic[T]):
    """A candidate to drop, the failure that convicts it, and the candidates it failed alongside (empty
    when it fails with none of the round's other new candidates)."""

    candidate: T
    failure: CarveFailure
    alongside: list[T] = field(default_factory=list)


def find_culprits(group: list[T], failure: CarveFailure, carve: Callable[[list[T]], CarveFailure | None],
                  selector_of: Callable[[T], str]) -> list[Culprit[T]]:
    """``group`` fails to carve together with ``failure``; carve parts of it (``carve`` returns None when
    a part carves) to find who is to blame. Halves first, following only the first half that fails, so one
    bad candidate among n costs about log2(n) carves; when both halves carve but not together, the second
    half's candidates join the first half one at a time and each that breaks it is to blame. The caller
    drops the culprits and carves the rest again (another bad one is found on the next pass). Returns at
    least one culprit unless the carve is not deterministic."""
    named = next((c for c in group if failure.selector and selector_of(c) == failure.selector), None)
    if named is not None:
        return [Culprit(named, failure)]
    if len(group) == 1:
        return [Culprit(group[0], failure)]
    mid = len(group) // 2
    first, second = group[:mid], group[mid:]
    for half in (first, second):
        half_failure = carve(half)
        if half_failure is not None:
            return find_culprits(half, half_failure, carve, selector_of)
    culprits: list[Culprit[T]] = []
    accepted = list(first)
    for cand in second:
        joined = carve(accepted + [cand])
        if joined is None:
            accepted.append(cand)
        else:
            culprits.append(Culprit(cand, joined, list(accepted)))
    return culprits

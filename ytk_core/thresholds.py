"""Thresholds a user gives in milliseconds or as a share of the model's measured time.

``0.2``, ``0.2ms`` and ``0.2 ms`` are absolute; ``2%`` is a share of the total it is applied to (the
baseline engine's latency for the autoloop, the profile's total for propose). A share keeps a
threshold meaningful from a 0.7 ms small run to a 75 ms full-size one.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .errors import UsageError

_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|%)?\s*$")


@dataclass(frozen=True)
class Threshold:
    value: float
    relative: bool  # value is a percentage of the total

    @classmethod
    def parse(cls, text: str | float, flag: str) -> "Threshold":
        if isinstance(text, (int, float)) and not isinstance(text, bool):
            text = str(text)
        m = _RE.match(str(text))
        if not m or not math.isfinite(float(m.group(1))):
            raise UsageError(f"{flag} {text!r}: expected milliseconds (0.2, 0.2ms) or a share of the model's time "
                             "(2%)")
        value, relative = float(m.group(1)), m.group(2) == "%"
        if relative and value > 100:
            raise UsageError(f"{flag} {text!r}: a share is at most 100%")
        return cls(value, relative)

    def ms(self, total_ms: float) -> float:
        return self.value / 100.0 * total_ms if self.relative else self.value

    def describe(self, total_ms: float | None = None) -> str:
        """``1% (0.075 ms)`` or ``0.1 ms``."""
        if not self.relative:
            return f"{self.value:g} ms"
        return f"{self.value:g}%" + (f" ({self.ms(total_ms):.3g} ms)" if total_ms is not None else "")


#: how far the per-layer medians' sum may stray from the end-to-end median before a report says so
PROFILE_AGREEMENT = 2.0


def profile_disagreement(layers_sum_ms: float, end_to_end_ms: float | None,
                         other_runs_ms: list[float] | tuple[float, ...] = ()) -> str | None:
    """A warning when the per-layer profile of an engine agrees with none of its timed runs within
    :data:`PROFILE_AGREEMENT` times either way, else ``None``. ``other_runs_ms``: the medians of the same
    engine run another way (the torch engine's inductor mode also times its op-by-op run, which is what
    its layers measure). Profiling per layer costs a little (a sum 10-30% over the end-to-end median is
    usual); far more means the layers were timed on a busy host or a shared GPU, and everything ranked by
    them (propose's shares, the slowest layers) is noise."""
    if not end_to_end_ms or end_to_end_ms <= 0 or layers_sum_ms <= 0:
        return None
    for run in (end_to_end_ms, *other_runs_ms):
        if run > 0 and 1 / PROFILE_AGREEMENT <= layers_sum_ms / run <= PROFILE_AGREEMENT:
            return None
    ratio = layers_sum_ms / end_to_end_ms
    times = f"{ratio:.0f}x" if ratio >= 10 else f"{ratio:.2g}x"
    return (f"the per-layer medians sum to {layers_sum_ms:.3f} ms, {times} the end-to-end median "
            f"({end_to_end_ms:.3f} ms): the per-layer profile does not describe this engine's run (a busy host "
            "or a GPU shared with other work?), and the time attributed to each region follows it; measure "
            "again with nothing else running on the target")

"""Numerics of an engine's outputs against the torch reference, with a tolerance stated per precision.

``max rel err`` is the largest absolute error divided by the largest reference magnitude of that
output: element-wise relative error explodes wherever the reference crosses zero, which says
nothing about the engine. Cosine similarity catches a wrong result whose magnitude is right.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, ConfigDict

#: fp16 engines carry ~3 significant digits per activation; errors compound over depth, so the bar
#: is a percent of the output's range. fp32 engines differ from torch only by summation order.
DEFAULT_TOLERANCE = {"fp16": (1e-2, 0.999), "fp32": (1e-4, 0.99999)}


class Tolerance(BaseModel):
    model_config = ConfigDict(extra="forbid")

    precision: str
    max_rel_err: float
    min_cosine: float

    def describe(self) -> str:
        return f"rel<={self.max_rel_err:g}, cos>={self.min_cosine:g} ({self.precision})"


def tolerance_for(precision: str, max_rel: float | None = None, min_cos: float | None = None) -> Tolerance:
    rel, cos = DEFAULT_TOLERANCE.get(precision, DEFAULT_TOLERANCE["fp16"])
    return Tolerance(precision=precision, max_rel_err=rel if max_rel is None else max_rel,
                     min_cosine=cos if min_cos is None else min_cos)


class OutputNumerics(BaseModel):
    """One output of one bundle against the reference."""

    model_config = ConfigDict(extra="forbid")

    implementation: str
    output: str
    shape: list[int]
    max_abs_err: float | None
    max_rel_err: float | None
    cosine: float | None
    tolerance: Tolerance
    passed: bool
    detail: str = ""


def compare(implementation: str, name: str, got: np.ndarray | None, ref: np.ndarray, tol: Tolerance) -> OutputNumerics:
    """Score ``got`` against ``ref``; missing outputs, shape mismatches and NaNs fail with the reason."""
    shape = [int(d) for d in ref.shape]

    def fail(detail: str) -> OutputNumerics:
        return OutputNumerics(implementation=implementation, output=name, shape=shape, max_abs_err=None,
                              max_rel_err=None, cosine=None, tolerance=tol, passed=False, detail=detail)

    if got is None:
        return fail("the engine returned no such output")
    if tuple(got.shape) != tuple(ref.shape):
        return fail(f"shape {list(got.shape)} != reference {shape}")
    a = np.asarray(got, dtype=np.float64).ravel()
    r = np.asarray(ref, dtype=np.float64).ravel()
    if not np.all(np.isfinite(a)):
        bad = int(np.count_nonzero(~np.isfinite(a)))
        return fail(f"{bad} non-finite value(s) (NaN/Inf) in the engine output")
    diff = np.abs(a - r)
    max_abs = float(diff.max()) if diff.size else 0.0
    scale = float(np.abs(r).max()) if r.size else 0.0
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else math.inf)
    na, nr = float(np.linalg.norm(a)), float(np.linalg.norm(r))
    if na == 0 and nr == 0:
        cos = 1.0
    elif na == 0 or nr == 0:
        cos = 0.0
    else:
        cos = float(np.dot(a, r) / (na * nr))
    ok = max_rel <= tol.max_rel_err and cos >= tol.min_cosine
    detail = "" if ok else ("max rel err over tolerance" if max_rel > tol.max_rel_err else "cosine under tolerance")
    return OutputNumerics(implementation=implementation, output=name, shape=shape, max_abs_err=max_abs,
                          max_rel_err=max_rel, cosine=cos, tolerance=tol, passed=ok, detail=detail)

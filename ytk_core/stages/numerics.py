"""Numerics of an engine's outputs against the torch reference, with a tolerance stated per precision.

``max rel err`` is the largest absolute error divided by the largest reference magnitude of that
output: element-wise relative error explodes wherever the reference crosses zero, which says
nothing about the engine. Cosine similarity catches a wrong result whose magnitude is right.
``p99 rel err`` / ``p99.9 rel err`` are percentiles of the same |err| / max|reference|: beside the
max they tell one stray element from an error spread over the whole output. They never exceed the
max, so the pass rule stays on the max and the cosine.

An output the engine lacks, one the reference lacks, or one whose shape or kind of dtype differs
is a failure on its own (``problem`` says which); nothing is scored for it.
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
    #: percentiles of |engine - reference| / max|reference| over the output's elements
    p99_rel_err: float | None = None
    p999_rel_err: float | None = None
    #: the reference's dtype (the engine's when the reference lacks the output)
    dtype: str = ""
    #: why nothing was scored: "missing" (the engine lacks it), "unexpected" (the reference lacks
    #: it), "shape", "dtype", "non-finite"; "" when it was scored against the tolerance
    problem: str = ""


#: dtype kinds that hold the same sort of number: any float width is a float (an fp16 engine may
#: return half), and signed, unsigned and bool integers are integers.
_KIND = {"f": "float", "i": "integer", "u": "integer", "b": "integer"}


def dtype_mismatch(got: np.ndarray, ref: np.ndarray) -> str:
    """Why ``got``'s dtype cannot stand for ``ref``'s, or "". An engine may widen or narrow a float,
    and may return an integer output as floats holding whole numbers (the torch engine returns
    every output as float32); a float output returned as integers, or anything not a real number,
    is a mismatch."""
    gk, rk = _KIND.get(got.dtype.kind), _KIND.get(ref.dtype.kind)
    if gk is not None and gk == rk:
        return ""
    if rk == "integer" and gk == "float":
        a = np.asarray(got)
        if bool(np.all(np.isfinite(a))) and bool(np.all(a == np.round(a))):
            return ""
        return f"dtype {got.dtype} holding fractions != reference {ref.dtype}"
    return f"dtype {got.dtype} != reference {ref.dtype}"


def compare(implementation: str, name: str, got: np.ndarray | None, ref: np.ndarray, tol: Tolerance) -> OutputNumerics:
    """Score ``got`` against ``ref``; missing outputs, shape or dtype mismatches and NaNs fail with the reason."""
    shape = [int(d) for d in ref.shape]

    def fail(problem: str, detail: str) -> OutputNumerics:
        return OutputNumerics(implementation=implementation, output=name, shape=shape, max_abs_err=None,
                              max_rel_err=None, cosine=None, tolerance=tol, passed=False, detail=detail,
                              dtype=str(ref.dtype), problem=problem)

    if got is None:
        return fail("missing", "the engine returned no such output")
    if tuple(got.shape) != tuple(ref.shape):
        return fail("shape", f"shape {list(got.shape)} != reference {shape}")
    why = dtype_mismatch(got, ref)
    if why:
        return fail("dtype", why)
    a = np.asarray(got, dtype=np.float64).ravel()
    r = np.asarray(ref, dtype=np.float64).ravel()
    if not np.all(np.isfinite(a)):
        bad = int(np.count_nonzero(~np.isfinite(a)))
        return fail("non-finite", f"{bad} non-finite value(s) (NaN/Inf) in the engine output")
    diff = np.abs(a - r)
    max_abs = float(diff.max()) if diff.size else 0.0
    scale = float(np.abs(r).max()) if r.size else 0.0

    def rel(err: float) -> float:
        return err / scale if scale > 0 else (0.0 if err == 0 else math.inf)

    max_rel = rel(max_abs)
    p99, p999 = (rel(float(q)) for q in np.quantile(diff, [0.99, 0.999])) if diff.size else (0.0, 0.0)
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
                          max_rel_err=max_rel, cosine=cos, tolerance=tol, passed=ok, detail=detail,
                          p99_rel_err=p99, p999_rel_err=p999, dtype=str(ref.dtype))


def unexpected(implementation: str, name: str, got: np.ndarray, tol: Tolerance) -> OutputNumerics:
    """An output the engine produces that the reference lacks: nothing vouches for it, so it fails."""
    return OutputNumerics(implementation=implementation, output=name, shape=[int(d) for d in got.shape],
                          max_abs_err=None, max_rel_err=None, cosine=None, tolerance=tol, passed=False,
                          detail="not in the reference", dtype=str(got.dtype), problem="unexpected")

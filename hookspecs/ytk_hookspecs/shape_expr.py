"""Shape and extent expressions of the kernel contract.

Grammar (a safe subset of Python expressions, never ``eval``-ed): integer literals, names of
extents, input dims written ``in0[2]`` (input 0, axis 2), ``+ - *``, ``//`` (floor division),
``cdiv(a, b)``, ``max(a, b)``, ``min(a, b)``. This covers strided output extents such as
``(in0[2] + 2*1 - 3)//2 + 1``, and maps one to one onto TensorRT's IExprBuilder operations.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Mapping, Sequence

__all__ = ["MAX_LEN", "ShapeExprError", "parse", "evaluate", "evaluate_extents"]


_FUNCS = {"cdiv", "max", "min"}
#: A contract's expressions are a line each; anything longer is not one (and parsing megabytes of
#: it costs memory and recursion the caller never asked for).
MAX_LEN = 1000


class ShapeExprError(ValueError):
    """A shape expression that does not parse or uses what the grammar does not allow."""
    pass


def parse(expr: str) -> ast.expr:
    """Parse and validate ``expr``; raises :class:`ShapeExprError` with the offending part.

    Nothing else escapes: an overlong, NUL-bearing or too deeply nested expression is a
    :class:`ShapeExprError` too.
    """
    text = str(expr).strip()
    if len(text) > MAX_LEN:
        raise ShapeExprError(f"shape expression {_short(text)}: {len(text)} characters, longer than the "
                             f"{MAX_LEN} a shape expression may have")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)  # '1in0' warns before it fails; the error says it
            tree = ast.parse(text, mode="eval")
        _check(tree.body, text)
    except SyntaxError as e:
        raise ShapeExprError(f"shape expression {_short(text)}: syntax error at column {e.offset}") from None
    except (ValueError, MemoryError, RecursionError) as e:
        if isinstance(e, ShapeExprError):
            raise
        raise ShapeExprError(f"shape expression {_short(text)}: cannot parse it ({type(e).__name__}: "
                             f"{str(e)[:200] or 'too deeply nested'})") from None
    return tree.body


def _short(text: str) -> str:
    return repr(text) if len(text) <= 120 else repr(text[:100]) + f"... ({len(text)} chars)"


def _check(node: ast.AST, src: str) -> None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return
    if isinstance(node, ast.Name):
        return
    if isinstance(node, ast.Subscript):
        if (isinstance(node.value, ast.Name) and node.value.id.startswith(("in", "out"))
                and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int)
                and not isinstance(node.slice.value, bool)):
            return
        raise ShapeExprError(f"shape expression {_short(src)}: only inK[axis] / outK[axis] may be subscripted")
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)):
        _check(node.left, src)
        _check(node.right, src)
        return
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        _check(node.operand, src)
        return
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS \
            and len(node.args) == 2 and not node.keywords:
        for a in node.args:
            _check(a, src)
        return
    raise ShapeExprError(
        f"shape expression {_short(src)}: unsupported part {_short(ast.unparse(node))} "
        "(allowed: ints, names, inK[axis], + - * //, cdiv/max/min)")


def evaluate(expr: str, input_shapes: Sequence[Sequence[int]], extents: Mapping[str, int] | None = None) -> int:
    """Evaluate ``expr`` for concrete input shapes (and already-known extents)."""
    extents = extents or {}

    def ev(n: ast.AST) -> int:
        if isinstance(n, ast.Constant):
            return int(n.value)
        if isinstance(n, ast.Name):
            if n.id not in extents:
                raise ShapeExprError(f"shape expression {expr!r}: unknown name {n.id!r}")
            return int(extents[n.id])
        if isinstance(n, ast.Subscript):
            assert isinstance(n.value, ast.Name) and isinstance(n.slice, ast.Constant)
            m = re.fullmatch(r"in([0-9]{1,6})", n.value.id)
            k = int(m.group(1)) if m else -1
            if k < 0 or k >= len(input_shapes):
                raise ShapeExprError(f"shape expression {expr!r}: no input {n.value.id}")
            shp = input_shapes[k]
            ax = int(n.slice.value)
            if ax < 0 or ax >= len(shp):
                raise ShapeExprError(f"shape expression {expr!r}: input {k} has rank {len(shp)}")
            return int(shp[ax])
        if isinstance(n, ast.UnaryOp):
            return -ev(n.operand)
        if isinstance(n, ast.BinOp):
            a, b = ev(n.left), ev(n.right)
            if isinstance(n.op, ast.Add):
                return a + b
            if isinstance(n.op, ast.Sub):
                return a - b
            if isinstance(n.op, ast.Mult):
                return a * b
            if b == 0:
                raise ShapeExprError(f"shape expression {_short(expr)}: division by zero "
                                     f"({_short(ast.unparse(n))} with a divisor of 0)")
            return a // b
        if isinstance(n, ast.Call):
            a, b = (ev(x) for x in n.args)
            fn = n.func.id  # type: ignore[attr-defined]
            if fn == "cdiv" and b == 0:
                raise ShapeExprError(f"shape expression {_short(expr)}: division by zero "
                                     f"({_short(ast.unparse(n))} with a divisor of 0)")
            return -(-a // b) if fn == "cdiv" else (max(a, b) if fn == "max" else min(a, b))
        raise ShapeExprError(f"shape expression {expr!r}: cannot evaluate")

    tree = parse(expr)
    try:
        return ev(tree)
    except RecursionError:
        raise ShapeExprError(f"shape expression {_short(str(expr))}: too deeply nested to evaluate") from None


def evaluate_extents(extents: Mapping[str, str], input_shapes: Sequence[Sequence[int]]) -> dict[str, int]:
    """Evaluate every extent in declaration order (later extents may use earlier ones)."""
    out: dict[str, int] = {}
    for name, e in extents.items():
        out[name] = evaluate(e, input_shapes, out)
    return out

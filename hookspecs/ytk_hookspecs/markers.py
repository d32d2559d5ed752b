"""Typed hook markers for the ``ytk`` project.

Backends decorate their implementations with :data:`hookimpl`; the names must match a hookspec in
:mod:`ytk_hookspecs.specs` exactly (ytk refuses to load a plugin with a misspelled hook).
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

import pluggy

__all__ = ["PROJECT", "ENTRY_POINT_GROUP", "hookspec", "hookimpl"]


PROJECT = "ytk"
ENTRY_POINT_GROUP = "ytk"

F = TypeVar("F", bound=Callable[..., Any])

_spec = pluggy.HookspecMarker(PROJECT)
_impl = pluggy.HookimplMarker(PROJECT)


def hookspec(fn: F | None = None, **kw: Any) -> Any:
    """Mark a function as a ytk hook specification (pluggy's marker for the ``ytk`` project)."""
    return _spec(fn, **kw) if fn is not None else _spec(**kw)


def hookimpl(fn: F | None = None, **kw: Any) -> Any:
    """Mark a backend function as the implementation of the hookspec of the same name.

    Typed so that the decorated function keeps its signature for type checkers.
    """
    return _impl(fn, **kw) if fn is not None else _impl(**kw)

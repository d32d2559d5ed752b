"""``ytk.toml``: project configuration, found in the working directory or a parent of it."""

from __future__ import annotations

import contextlib
import os
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import UsageError

from ytk_hookspecs.project_config import CONFIG_NAME, ConfigNotFound
from ytk_hookspecs.project_config import find_config as _find_config

__all__ = ["CONFIG_NAME", "env_bytes", "env_overlay", "find_config", "load_config"]


def env_bytes(name: str, *, minimum: int = 0, default: str = "") -> int | None:
    """A byte count from environment variable ``name`` (None when unset or empty): ASCII digits only, at
    least ``minimum``; anything else is a one-line :class:`UsageError` naming the variable."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    if not (raw.isascii() and raw.isdigit()) or int(raw) < minimum:
        what = "a positive whole number of bytes" if minimum > 0 else "a whole number of bytes"
        raise UsageError(f"{name}={raw!r}: expected {what}{f' (default {default})' if default else ''}, or unset it")
    return int(raw)


@contextlib.contextmanager
def env_overlay(overlay: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the duration of a block; each is restored (or removed) after it."""
    old = {k: os.environ.get(k) for k in overlay}
    os.environ.update(overlay)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


#: what ``[workers]`` in ytk.toml may hold (docs/guide.md, docs/gaia.md): a misspelled key would otherwise be
#: ignored, and the command would quietly compile here or start without the token it was meant to have
WORKER_KEYS = ("kronos", "kronos_token", "gaia_ray", "gaia_api_key")


def find_config(start: Path | None = None) -> Path | None:
    """``$YTK_CONFIG``, else the nearest ytk.toml (backends read the same file: :mod:`ytk_hookspecs.project_config`)."""
    try:
        return _find_config(start)
    except ConfigNotFound as e:
        raise UsageError(str(e)) from None


def load_config(start: Path | None = None) -> tuple[dict[str, Any], Path | None]:
    """Return the parsed ytk.toml (empty when there is none) and its path."""
    p = find_config(start)
    if p is None:
        return {}, None
    try:
        data = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{p}: not valid TOML: {e}") from None
    backends = data.get("backends", {})
    if not isinstance(backends, dict):
        raise UsageError(f"{p}: [backends] must be a table, e.g.\n[backends]\nengine = \"torch\"")
    workers = data.get("workers", {})
    if not isinstance(workers, dict) or not all(isinstance(v, str) for v in workers.values()):
        raise UsageError(f"{p}: [workers] must be a table of strings, e.g.\n[workers]\nkronos = \"http://orin:8470\"")
    unknown = sorted(set(workers) - set(WORKER_KEYS))
    if unknown:
        import difflib

        hints = [f"{k!r} (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(k, WORKER_KEYS, 1)) else repr(k)
                 for k in unknown]
        raise UsageError(f"{p}: unknown key(s) under [workers]: {', '.join(hints)}; the known ones are "
                         f"{', '.join(WORKER_KEYS)}")
    return data, p

"""``ytk.toml``: project configuration, found in the working directory or a parent of it."""

from __future__ import annotations

import contextlib
import os
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import UsageError

CONFIG_NAME = "ytk.toml"


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


def find_config(start: Path | None = None) -> Path | None:
    env = os.environ.get("YTK_CONFIG")
    if env:
        p = Path(env)
        if not p.is_file():
            raise UsageError(f"YTK_CONFIG points at {p}, which is not a file")
        return p
    d = (start or Path.cwd()).resolve()
    for cand in (d, *d.parents):
        p = cand / CONFIG_NAME
        if p.is_file():
            return p
    return None


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
    return data, p

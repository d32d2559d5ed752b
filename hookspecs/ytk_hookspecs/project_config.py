"""Where a project's ``ytk.toml`` is, for a backend that must read its own table before any stage runs.

The core hands a backend its ``[backends.<name>]`` table as ``ctx.config`` on every call; an
``availability()`` probe gets no context, yet may need the same settings (a service's URL). It reads
them with :func:`backend_table`, which finds the file exactly as the core does (:func:`find_config`):
``$YTK_CONFIG``, else ``ytk.toml`` in the working directory or a parent of it.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

__all__ = ["CONFIG_NAME", "CONFIG_ENV", "ConfigNotFound", "find_config", "backend_table"]


CONFIG_NAME = "ytk.toml"
CONFIG_ENV = "YTK_CONFIG"


class ConfigNotFound(ValueError):
    """``$YTK_CONFIG`` names something that is not a file."""


def find_config(start: Path | None = None) -> Path | None:
    """``$YTK_CONFIG``, else the nearest ``ytk.toml`` from ``start`` (the working directory) upwards."""
    env = os.environ.get(CONFIG_ENV)
    if env:
        p = Path(env)
        if not p.is_file():
            raise ConfigNotFound(f"{CONFIG_ENV} points at {p}, which is not a file")
        return p
    d = (start or Path.cwd()).resolve()
    for cand in (d, *d.parents):
        p = cand / CONFIG_NAME
        if p.is_file():
            return p
    return None


def backend_table(name: str) -> dict[str, Any]:
    """The ``[backends.<name>]`` table of the project's ytk.toml; empty when there is none or it cannot be
    read (the core reports a broken file itself, with the command that read it)."""
    try:
        path = find_config()
        data = tomllib.loads(path.read_text()) if path is not None else {}
    except (ConfigNotFound, OSError, tomllib.TOMLDecodeError):
        return {}
    table = (data.get("backends") or {}).get(name) if isinstance(data.get("backends"), dict) else None
    return dict(table) if isinstance(table, dict) else {}

"""Where the client finds its service: the environment first, then ``[backends.gaia]`` in ytk.toml.

=======================  ===========================  =============================================
environment              ``[backends.gaia]`` key      what
=======================  ===========================  =============================================
``YTK_GAIA_URL``         ``url``                      the service, e.g. ``http://gpu-box:8471``
``YTK_GAIA_API_KEY``     ``api_key``                  the key the service gave you
``YTK_GAIA_RETRY_S``     ``retry_s``                  how long an unreachable or busy service is retried
                         ``generator``                the service's generator to ask for (default: its own)
=======================  ===========================  =============================================
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from .errors import GaiaUsageError

URL_ENV, KEY_ENV, RETRY_ENV = "YTK_GAIA_URL", "YTK_GAIA_API_KEY", "YTK_GAIA_RETRY_S"
DEFAULT_RETRY_S = 120.0
KEYS = ("url", "api_key", "retry_s", "generator")


@dataclass(frozen=True)
class ClientSettings:
    url: str
    api_key: str | None
    retry_s: float
    generator: str | None
    #: where the URL came from, for an error about it: the variable or the ytk.toml key
    url_from: str = URL_ENV


def client_settings(table: dict[str, Any] | None = None) -> ClientSettings | None:
    """The client's settings (``table``: the ``[backends.gaia]`` table the core passed as ``ctx.config``; None
    reads ytk.toml here); None when no service is configured."""
    if table is None:
        from ytk_hookspecs.project_config import backend_table

        table = backend_table("gaia")
    unknown = sorted(k for k in table if k not in KEYS)
    if unknown:
        raise GaiaUsageError(f"[backends.gaia] in ytk.toml: unknown key(s) {', '.join(unknown)} (known: "
                             f"{', '.join(KEYS)})")
    url = os.environ.get(URL_ENV) or str(table.get("url") or "")
    if not url:
        return None
    raw = os.environ.get(RETRY_ENV) or table.get("retry_s")
    try:
        retry_s = max(0.0, float(raw)) if raw not in (None, "") else DEFAULT_RETRY_S
    except (TypeError, ValueError):
        raise GaiaUsageError(f"{RETRY_ENV} (or [backends.gaia] retry_s) = {raw!r}: expected a number of seconds"
                             ) from None
    key = os.environ.get(KEY_ENV) or (str(table["api_key"]) if table.get("api_key") else None)
    gen = table.get("generator")
    return ClientSettings(url=url, api_key=key, retry_s=retry_s, generator=str(gen) if gen else None,
                          url_from=URL_ENV if os.environ.get(URL_ENV) else "[backends.gaia] url")


def require_settings(table: dict[str, Any] | None) -> ClientSettings:
    found = client_settings(table)
    if found is None:
        raise GaiaUsageError(f"no Gaia service configured: set {URL_ENV} (e.g. http://gpu-box:8471) and {KEY_ENV}, or "
                             "url and api_key under [backends.gaia] in ytk.toml")
    return found

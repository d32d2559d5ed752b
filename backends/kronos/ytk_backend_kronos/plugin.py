"""Registers ``ytk worker kronos``. The worker serves no backend role itself: it runs the engine chosen
with ``--engine``, and clients reach it through the core (``--worker``)."""

from __future__ import annotations

from typing import Any

from ytk_hookspecs import hookimpl


@hookimpl
def ytk_cli_commands(cli: Any) -> None:
    from .cli import add_commands

    add_commands(cli)

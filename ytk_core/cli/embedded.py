"""``ytk embedded``: the steps of the flow. Each command lives in its own cmd_*.py module."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True)


def register_commands() -> None:
    from . import cmd_build_plugin, cmd_compile, cmd_prepare, cmd_propose, cmd_verify  # noqa: F401

"""The hook specifications: how a plugin hands ytk its backends and its CLI commands.

A plugin is a module (or object) registered under the entry-point group ``ytk``. Its backends are
objects, registered from :func:`ytk_register_backends`; what each role's object implements is in
:mod:`ytk_hookspecs.roles`. pluggy discovers plugins and calls these two hooks; the stages call
methods on the ONE backend object the core selected per role, never a hook broadcast.
"""

from __future__ import annotations

from typing import Any, Callable

from .markers import hookspec

__all__ = ["ytk_cli_commands", "ytk_register_backends"]


@hookspec
def ytk_register_backends(register: Callable[[Any], None]) -> None:
    """Register this plugin's backend objects: call ``register(backend)`` once per object.

    Called once per plugin when ytk starts. Each object carries ``info`` (a
    :class:`~ytk_hookspecs.models.BackendInfo`) and the methods of the roles it declares
    (:mod:`ytk_hookspecs.roles`). ytk checks each object against those protocols: an object that
    lacks a method, or whose name another backend already took, is disabled with a warning naming
    it, and the plugin's other objects still load. An exception raised here disables the whole
    plugin with one warning naming its distribution; the rest of ytk keeps working. Keep it cheap:
    build objects here, import heavy libraries inside their methods.

    Example::

        @hookimpl
        def ytk_register_backends(register):
            register(MyEngine())
            register(MyGenerator())
    """


@hookspec
def ytk_cli_commands(cli: Any) -> None:
    """Add commands to the ``ytk`` CLI (called on every plugin, e.g. ``ytk worker kronos``).

    ``cli`` has ``.worker`` (the ``ytk worker`` typer group) and ``.root`` (the top-level typer
    app). Add commands with the usual typer decorators. An exception raised here is a warning
    naming the plugin; the other commands still work.

    Example::

        @hookimpl
        def ytk_cli_commands(cli):
            @cli.worker.command("kronos")
            def kronos(port: int = 8470): ...
    """

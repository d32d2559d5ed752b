"""The ``ytk`` / ``yasp-toolkit`` command line."""

from __future__ import annotations

import errno
import sys
from dataclasses import dataclass
from typing import Annotated

import typer
from rich.text import Text

from .. import __version__
from ytk_hookspecs.errors import StageError

from ..errors import YtkError
from ..logs import configure
from ..runtime import reset_runtime, runtime, stderr

app = typer.Typer(name="ytk", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  rich_markup_mode=None,
                  help="yasp-toolkit: measure an engine on its target, carve the slow regions out as "
                       "custom-op nodes, generate a kernel per region, build plugins, rebuild, verify.")
worker_app = typer.Typer(no_args_is_help=True, help="Workers that run on target hardware (added by backends).")


@dataclass
class CliExtension:
    """Handed to ``ytk_cli_commands``: where a backend may add its commands."""

    root: typer.Typer
    worker: typer.Typer


def _version(value: bool) -> None:
    if value:
        typer.echo(f"yasp-toolkit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    verbose: Annotated[int, typer.Option("-v", "--verbose", count=True, help="more log output (-vv for debug)")] = 0,
    quiet: Annotated[int, typer.Option("-q", "--quiet", count=True, help="less log output")] = 0,
    log_format: Annotated[str, typer.Option("--log-format", help="auto, console or json")] = "auto",
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="print the version and exit")] = False,
) -> None:
    if log_format not in ("auto", "console", "json"):
        raise YtkError(f"--log-format must be auto, console or json, not {log_format!r}")
    configure(verbose - quiet, log_format)


def _register_groups() -> None:
    from . import autoloop, backends, embedded, kernelgen  # noqa: F401  (commands register on import)

    embedded.register_commands()

    app.add_typer(embedded.app, name="embedded", help="Kronos steps: prepare, propose, compile, build-plugin, verify.")
    app.add_typer(kernelgen.app, name="kernelgen", help="Gaia kernel generation: export, compile, get.")
    app.add_typer(worker_app, name="worker")


_registered = False


def build_app() -> typer.Typer:
    global _registered
    if not _registered:
        _register_groups()
        runtime().manager.broadcast_cli(CliExtension(root=app, worker=worker_app))
        _registered = True
    return app


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: user errors are one paragraph on stderr and a non-zero exit."""
    args = sys.argv[1:] if argv is None else argv
    configure(0, "auto")
    try:
        cmd = typer.main.get_command(build_app())
        # standalone mode lets click render its own usage errors; ours propagate to here.
        cmd.main(args=args, prog_name="ytk", standalone_mode=True)
        return 0
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except StageError as e:
        msg = e.render() if isinstance(e, YtkError) else str(e)
        stderr.print(Text.assemble(("error: ", "bold red"), msg), highlight=False)
        return e.exit_code
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        where = f" writing {e.filename}" if e.filename else ""
        stderr.print(Text.assemble(("error: ", "bold red"),
                                   f"no space left on the device{where} ({e.strerror}); free some space and run "
                                   "the command again (a partial file is never left behind, and `ytk autoloop` "
                                   "resumes where it stopped)"), highlight=False)
        return 1
    except KeyboardInterrupt:
        stderr.print("interrupted")
        return 130
    finally:
        reset_runtime()


def entry() -> None:
    sys.exit(main())

"""The ``ytk`` / ``yasp-toolkit`` command line."""

from __future__ import annotations

import errno
import os
import re
import sys
import traceback
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from rich.text import Text

from .. import __version__
from ytk_hookspecs.errors import StageError

from ..errors import YtkError
from ..logs import configure
from ..runtime import reset_runtime, runtime, stderr, stdout

app = typer.Typer(name="ytk", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  rich_markup_mode=None, context_settings={"help_option_names": ["-h", "--help"]},
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
    ctx: typer.Context,
    verbose: Annotated[int, typer.Option(
        "-v", "--verbose", count=True, help="debug log lines (-vv: also the traceback of an internal error)")] = 0,
    quiet: Annotated[int, typer.Option("-q", "--quiet", count=True, help="less log output")] = 0,
    log_format: Annotated[str, typer.Option("--log-format", help="console, json (one JSON object per line), or "
                                            "auto: console on a terminal, json when stderr is a pipe or a "
                                            "file")] = "auto",
    version: Annotated[bool, typer.Option("-V", "--version", callback=_version, is_eager=True,
                                          help="print the version and exit")] = False,
) -> None:
    if log_format not in ("auto", "console", "json"):
        raise YtkError(f"--log-format must be auto, console or json, not {log_format!r}")
    configure(verbose - quiet, log_format)
    if ctx.invoked_subcommand != "backends":  # its report lists them: the same line twice helps no one
        runtime().manager.log_warnings()


def _register_groups() -> None:
    from . import autoloop, backends, embedded, kernelgen  # noqa: F401  (commands register on import)

    embedded.register_commands()

    app.add_typer(embedded.app, name="embedded",
                  help="The flow's steps: prepare, propose, compile, build-plugin, verify.")
    app.add_typer(kernelgen.app, name="kernelgen",
                  help="Kernel generation (local generators or a Gaia service): export, compile, get.")
    app.add_typer(worker_app, name="worker")


_registered = False


def build_app() -> typer.Typer:
    global _registered
    if not _registered:
        _register_groups()
        runtime().manager.add_cli_commands(CliExtension(root=app, worker=worker_app))
        _registered = True
    return app


_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]|[\x00-\x08\x0b-\x1f\x7f]")


def clean(msg: str) -> str:
    """A message as the user sees it: no ANSI colour codes or control bytes from a library's text."""
    return _ANSI.sub("", msg)


def _print_error(msg: str) -> None:
    stderr.print(Text.assemble(("error: ", "bold red"), clean(msg)), highlight=False)


def _wants_traceback(args: list[str]) -> bool:
    if os.environ.get("YTK_TRACEBACK") == "1":
        return True
    n = 0
    for a in args:
        if a == "--":
            break
        if a == "--verbose":
            n += 1
        elif re.fullmatch(r"-v+", a):
            n += len(a) - 1
    return n >= 2


def _wants_json(args: list[str]) -> bool:
    head = args[: args.index("--")] if "--" in args else args
    return "--json" in head


def _json_error(args: list[str], msg: str, code: int) -> int:
    """With --json, a failure is also one JSON object on stdout, so a pipeline never parses an empty answer."""
    from .. import runtime as rt_mod

    if code and _wants_json(args) and not rt_mod.JSON_EMITTED:  # a report already printed carries the verdict
        import json

        out = rt_mod.JSON_OUT or sys.stdout
        out.write(json.dumps({"error": clean(msg), "exit_code": code}) + "\n")
        out.flush()
    return code


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: user errors are one paragraph on stderr and a non-zero exit (with
    ``--json``, also a JSON error object on stdout)."""
    args = sys.argv[1:] if argv is None else argv
    return _main(args)


def _main(args: list[str]) -> int:
    """With --json, stdout is the JSON document's alone: whatever else writes to ``sys.stdout`` meanwhile
    (a ``print`` in the user's model.py, a backend) goes to stderr."""
    from .. import runtime as rt_mod

    if not _wants_json(args):
        return _run(args)
    saved, real = sys.stdout, None
    rt_mod.JSON_OUT = saved
    try:
        if saved.fileno() == 1:  # the process's stdout: what a child process or native code writes moves too
            saved.flush()
            real = os.dup(1)
            rt_mod.JSON_OUT = os.fdopen(os.dup(real), "w", encoding=getattr(saved, "encoding", None) or "utf-8")
            os.dup2(2, 1)
    except (OSError, ValueError, AttributeError):  # no file descriptor (a test's capture): Python-level only
        pass
    sys.stdout = sys.stderr
    try:
        return _run(args)
    finally:
        sys.stdout = saved
        if real is not None:
            try:
                rt_mod.JSON_OUT.close()
            except OSError:
                pass
            os.dup2(real, 1)
            os.close(real)
        rt_mod.JSON_OUT = None


def _run(args: list[str]) -> int:
    from .. import interrupts

    with interrupts.watching():
        return _run_watched(args)


def _run_watched(args: list[str]) -> int:
    from .. import interrupts

    configure(0, "auto")
    from .. import runtime as rt_mod

    rt_mod.JSON_EMITTED = False  # a fresh invocation: nothing printed yet
    runtime().defer_load_warnings = True  # logged by the root callback, in the format the user asked for
    try:
        click = _click()
        cmd = typer.main.get_command(build_app())
        try:
            # without standalone mode typer returns an exit's code (a Ctrl-C is Exit(130)) instead of exiting
            rv = cmd.main(args=args, prog_name="ytk", standalone_mode=False)
            if isinstance(rv, int) and not isinstance(rv, bool) and rv:
                return _interrupted(args) if rv == 130 else _json_error(args, f"exit status {rv}", rv)
            if interrupts.pending():  # a Ctrl-C something swallowed (a finalizer) and no checkpoint re-raised
                return _interrupted(args)
        except click.exceptions.NoArgsIsHelpError as e:  # `ytk` or a group alone: its help, as click shows it
            stdout.print(e.format_message(), markup=False, highlight=False, soft_wrap=True)
            return 0
        except click.exceptions.UsageError as e:  # a bad flag or a missing option: one line like every error
            where = e.ctx.command_path if e.ctx is not None else "ytk"
            msg = f"{e.format_message()} (`{where} -h` lists the options)"
            _print_error(msg)
            return _json_error(args, msg, 2)
        except _ABORT:
            return _interrupted(args)
        except _EXIT as e:  # --help, --version
            return int(getattr(e, "exit_code", 0) or 0)
        except click.ClickException as e:
            _print_error(e.format_message())
            return _json_error(args, e.format_message(), e.exit_code)
        return 0
    except SystemExit as e:
        if _reader_gone(e):
            return _stdout_closed()
        foreign = _foreign_exit(e)
        if foreign:
            # A sys.exit() in the user's code (or a library) must not decide ytk's exit status.
            msg = (f"{foreign} called sys.exit({e.code!r}) while ytk was running it; ytk's exit status is its own, "
                   "so this is an error. Remove the call from that code.")
            _print_error(msg)
            return _json_error(args, msg, 2)
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if code == 130:  # typer turns a Ctrl-C into Exit(130) before it reaches the handler below
            return _interrupted(args)
        return _json_error(args, "bad command line (the usage error is on stderr)", code)
    except StageError as e:
        msg = e.render() if isinstance(e, YtkError) else str(e)
        if e.exit_code == 1 and e.__cause__ is not None and _wants_traceback(args):  # a bug, said in one line
            sys.stderr.write("".join(traceback.format_exception(e.__cause__)))
        _print_error(msg)
        return _json_error(args, msg, e.exit_code)
    except _bad_input_errors() as e:
        # a parser's own documented error reaching the top: the input was bad, exit 2 like a UsageError
        _print_error(str(e))
        return _json_error(args, str(e), 2)
    except OSError as e:
        if e.errno == errno.EPIPE:
            return _stdout_closed()
        where = f" {e.filename}" if e.filename else ""
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            msg = (f"no space left on the device writing{where} ({e.strerror}); free some space and run the "
                   "command again (a partial file is never left behind, and `ytk autoloop` resumes where it stopped)")
            _print_error(msg)
            return _json_error(args, msg, 1)
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT, errno.ENOTDIR, errno.EISDIR,
                       errno.ENAMETOOLONG, errno.EEXIST, errno.ENOTEMPTY):
            # A path the user gave (an unwritable -o, a missing folder): bad input, exit 2.
            msg = f"cannot use{where}: {e.strerror or e}; check the path and its permissions"
            _print_error(msg)
            return _json_error(args, msg, 2)
        return _internal(e, args)
    except KeyboardInterrupt:
        return _interrupted(args)
    except Exception as e:  # noqa: BLE001  -- the last net: never a bare traceback on a user's screen
        return _internal(e, args)
    finally:
        reset_runtime()


def _click():  # type: ignore[no-untyped-def]
    """The click typer runs on: recent typer vendors its own copy, whose exceptions are not click's."""
    try:
        from typer import _click as vendored  # type: ignore[attr-defined]

        return vendored
    except ImportError:
        import click

        return click


#: click's and typer's exit and abort exceptions (typer vendors click; which module holds them varies)
_EXIT = tuple({getattr(m, "Exit", None) for m in (typer, _click(), _click().exceptions)} - {None})
_ABORT = tuple({getattr(m, "Abort", None) for m in (typer, _click(), _click().exceptions)} - {None})


def _interrupted(args: list[str]) -> int:
    msg = "interrupted" + ("; run the same command again to resume where it stopped" if "autoloop" in args else "")
    stderr.print(msg, highlight=False, markup=False)
    return _json_error(args, msg, 130)


def _reader_gone(e: SystemExit) -> bool:
    """The exit rich raises when whoever reads ytk's output went away (``ytk ... | head``): its console turns
    the BrokenPipeError into SystemExit(1) in ``on_broken_pipe``."""
    tb = traceback.extract_tb(e.__traceback__)
    return bool(tb) and tb[-1].name == "on_broken_pipe" or isinstance(e.__context__, BrokenPipeError)


def _stdout_closed() -> int:
    """The reader of ytk's output closed it (``| head``): stop quietly, as a program killed by SIGPIPE does
    (exit 141 = 128 + SIGPIPE), with stdout pointed at /dev/null so the interpreter's last flush cannot fail."""
    from .. import runtime as rt_mod

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, (rt_mod.JSON_OUT or sys.stdout).fileno())  # with --json, the JSON's own stream
    except (OSError, ValueError):
        pass
    return 141


def _foreign_exit(e: SystemExit) -> str | None:
    """'file:line' when ``e`` was raised outside click/typer (which turn ytk's own exits into
    SystemExit), i.e. by code ytk ran for the user; None for ytk's own exits."""
    import click

    tb = traceback.extract_tb(e.__traceback__)
    if not tb:
        return None
    last = tb[-1]
    ours = [os.path.dirname(click.__file__), os.path.dirname(typer.__file__), os.path.dirname(__file__)]
    if any(os.path.abspath(last.filename).startswith(d + os.sep) for d in ours):
        return None
    return f"{last.filename}:{last.lineno}"


def _bad_input_errors() -> tuple[type[BaseException], ...]:
    from ytk_hookspecs.kernel_source import KernelSourceError
    from ytk_hookspecs.models import ArchSpecError, ArtifactError
    from ytk_hookspecs.shape_expr import ShapeExprError

    return (ArtifactError, ArchSpecError, ShapeExprError, KernelSourceError)


def _blamed_backend(e: BaseException) -> Any:
    """The backend whose own code raised ``e`` (the innermost frame in a backend's package), if any: an
    error in a backend is that backend's failure, not a ytk bug."""
    try:
        from ..runtime import runtime

        loaded = list(runtime().manager.backends.values())
    except Exception:  # noqa: BLE001  -- attribution must never hide the error itself
        return None
    tops = {type(b.impl).__module__.split(".")[0]: b for b in loaded}
    tops.pop("ytk_core", None)
    tops.pop("ytk_hookspecs", None)
    for frame, _ in reversed(list(traceback.walk_tb(e.__traceback__))):
        top = str(frame.f_globals.get("__name__", "")).split(".")[0]
        if top in tops:
            return tops[top]
    return None


def _first_line(e: BaseException) -> str:
    """What an exception says, on one line; a pydantic ValidationError's first problem, not its header."""
    errors = getattr(e, "errors", None)
    if callable(errors) and type(e).__name__ == "ValidationError":
        try:
            first = e.errors()[0]  # type: ignore[attr-defined]
            loc = ".".join(str(x) for x in first.get("loc", ())) or type(e).__name__
            return f"{getattr(e, 'title', '')} {loc}: {first.get('msg')}".strip()[:300]
        except Exception:  # noqa: BLE001
            pass
    return (str(e).strip().splitlines() or [""])[0][:300]


def _internal(e: BaseException, args: list[str]) -> int:
    """An error no stage turned into a message: a backend's failure when its own code raised it (one line
    naming it, exit 3), else a ytk bug (exit 1); the traceback on -vv."""
    if _wants_traceback(args):
        sys.stderr.write("".join(traceback.format_exception(e)))
    first = _first_line(e)
    backend = _blamed_backend(e)
    if backend is not None:
        msg = (f"{backend.info.name} backend (from {backend.distribution}) failed: {type(e).__name__}"
               f"{': ' + first if first else ''}. This is a bug in that backend, not in ytk: report it to its "
               "authors (-vv or YTK_TRACEBACK=1 shows the traceback)")
        _print_error(msg)
        return _json_error(args, msg, 3)
    msg = (f"internal error: {type(e).__name__}{': ' + first if first else ''} (this is a ytk bug; run with -vv, "
           "or YTK_TRACEBACK=1, to see the traceback, and please report it)")
    _print_error(msg)
    return _json_error(args, msg, 1)


def entry() -> None:
    sys.exit(main())

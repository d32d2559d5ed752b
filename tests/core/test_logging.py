"""-v shows debug lines from every component, however early its logger was made.

The runtime (and the backend manager) make their loggers while the CLI is built, before the -v /
--log-format callback configures logging; those loggers must follow that configuration all the same.
"""

from __future__ import annotations

from tests.conftest import run_cli

#: What ``runtime.select`` logs at debug level for a backend named by its flag.
SELECT_DEBUG = "chosen with --kernelgen"


def test_a_logger_made_before_configure_follows_it(capsys):
    from ytk_core.logs import configure, get_logger

    configure(0, "console")
    log = get_logger(component="early")
    configure(1, "console")
    log.debug("debug line from an early logger")
    assert "debug line from an early logger" in capsys.readouterr().err
    configure(0, "console")
    log.debug("hidden at the default level")
    assert "hidden at the default level" not in capsys.readouterr().err


def test_v_shows_the_runtime_select_debug_line(ytk, tmp_path):
    """In-process: a runtime made before -v takes effect (as ``build_app`` makes it on a process's first
    command) logs ``runtime.select``'s debug line with -v, and only with -v."""
    from ytk_core.logs import configure
    from ytk_core.runtime import reset_runtime, runtime

    get = ("kernelgen", "get", "no-such-job", "-o", tmp_path / "k.py", "--kernelgen", "mock")
    configure(0, "console")
    reset_runtime()
    runtime()
    r = ytk("-v", *get)
    assert "does not know job" in r.stderr  # the command ran past the selection
    assert SELECT_DEBUG in r.stderr, r.stderr
    r = ytk(*get)
    assert "does not know job" in r.stderr and SELECT_DEBUG not in r.stderr, r.stderr


def test_v_shows_the_runtime_select_debug_line_from_the_console_script(tmp_path):
    r = run_cli("-v", "kernelgen", "get", "no-such-job", "-o", tmp_path / "k.py", "--kernelgen", "mock")
    assert r.code == 2 and "does not know job" in r.stderr
    assert SELECT_DEBUG in r.stderr, r.stderr

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


def test_json_lines_stay_whole_and_carry_the_run_id_on_every_thread(capsys):
    """Concurrent kernel jobs log from worker threads while third-party stdlib logging writes too: every
    line is one JSON object (or one stdlib line), and every ytk event has the run id."""
    import json
    import logging
    from concurrent.futures import ThreadPoolExecutor

    from ytk_core.logs import configure, get_logger
    from ytk_core.runtime import reset_runtime, runtime

    configure(0, "json")
    reset_runtime()
    run_id = runtime().run_id
    log = get_logger(component="jobs")
    other = logging.getLogger("thirdparty")

    def job(i: int) -> None:
        for k in range(200):
            log.info("variant scored", job=i, k=k, pad="x" * 300)
            other.warning("chatty %d %d", i, k)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(job, range(8)))
    lines = capsys.readouterr().err.splitlines()
    events = [json.loads(ln) for ln in lines if ln.startswith("{")]
    stdlib = [ln for ln in lines if not ln.startswith("{")]
    assert len(events) == 1600 and all(e["run_id"] == run_id for e in events)
    assert len(stdlib) == 1600 and all(ln.startswith("WARNING thirdparty: chatty") for ln in stdlib)
    configure(0, "console")

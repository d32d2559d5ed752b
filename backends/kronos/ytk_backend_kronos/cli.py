"""``ytk worker kronos``: start the worker (uvicorn) on this machine."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ytk_core.kronos.client import TOKEN_ENV
from ytk_core.kronos.protocol import DEFAULT_PORT

from .settings import MB, WorkerSettings


def add_commands(cli: Any) -> None:
    @cli.worker.command("kronos")
    def kronos(
        engine: Annotated[Optional[str], typer.Option(
            "--engine", help="engine backend that builds and profiles the jobs: tensorrt, torch, mock, ... "
            "(default: the automatic choice on this machine)", show_default=False)] = None,
        host: Annotated[str, typer.Option(
            "--host", help="address to listen on (0.0.0.0: every interface)")] = "127.0.0.1",
        port: Annotated[int, typer.Option("--port", help="port to listen on")] = DEFAULT_PORT,
        state_dir: Annotated[Optional[Path], typer.Option(
            "--state-dir", help="where job records, uploads and bundles live (default: <ytk cache>/kronos-worker); "
            "a restarted worker knows the jobs recorded here", show_default=False)] = None,
        token_file: Annotated[Optional[Path], typer.Option(
            "--token-file", help=f"file holding the token clients must send (else ${TOKEN_ENV}, else [workers] "
            "kronos_token in ytk.toml)", show_default=False)] = None,
        max_upload_mb: Annotated[float, typer.Option(
            "--max-upload-mb", help="largest job archive accepted (MiB)")] = 2048,
        max_extract_mb: Annotated[float, typer.Option("--max-extract-mb", help="largest job unpacked (MiB)")] = 8192,
        max_members: Annotated[int, typer.Option("--max-members", help="most files in one job archive")] = 4096,
        gpus: Annotated[Optional[str], typer.Option(
            "--gpus", help="GPU indices to run jobs on, one engine build at a time on each, e.g. 0,1 (default: every "
            "CUDA GPU for a real engine, one slot for a simulated one)", show_default=False)] = None,
        keep_days: Annotated[float, typer.Option(
            "--keep-days", help="delete a finished job's folder (upload, log, bundle) this many days after it "
            "finished")] = 7.0,
    ) -> None:
        """Serve the Kronos worker: clients run `ytk embedded compile --worker http://HOST:PORT` (or `ytk autoloop
        --worker ...`) and their engines are built and profiled here. Jobs bring their plugins along; nothing
        else is installed. The OpenAPI document is at /openapi.json, interactive docs at /docs."""
        settings = build_settings(engine, state_dir, token_file, max_upload_mb, max_extract_mb, max_members, gpus,
                                  keep_days)
        serve(settings, host, port)


def build_settings(engine: str | None, state_dir: Path | None, token_file: Path | None, max_upload_mb: float,
                   max_extract_mb: float, max_members: int, gpus: str | None, keep_days: float = 7.0) -> WorkerSettings:
    from ytk_core.errors import UsageError
    from ytk_core.runtime import runtime
    from ytk_core.stages.kernelgen import cache_dir
    from ytk_core.target import detect_arch
    from ytk_hookspecs.models import ArchSpec

    if min(max_upload_mb, max_extract_mb, keep_days) <= 0 or max_members < 1:
        raise UsageError("--max-upload-mb, --max-extract-mb and --keep-days must be positive, --max-members at "
                         "least 1")
    rt = runtime()
    sel = rt.select("engine", engine, ArchSpec.parse(detect_arch()[0]))
    return WorkerSettings(state_dir=(state_dir or cache_dir() / "kronos-worker").resolve(), engine=sel.name,
                          token=_token(token_file), max_upload_bytes=int(max_upload_mb * MB),
                          max_extract_bytes=int(max_extract_mb * MB), max_members=max_members,
                          gpus=_gpus(gpus, sel.backend.info.simulated), keep_days=keep_days)


def _token(token_file: Path | None) -> str:
    from ytk_core.errors import UsageError
    from ytk_core.runtime import runtime

    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as e:
            raise UsageError(f"--token-file {token_file}: cannot read it: {e.strerror or e}") from None
        where = f"--token-file {token_file}"
    else:
        token = os.environ.get(TOKEN_ENV) or str((runtime().config.get("workers") or {}).get("kronos_token", ""))
        where = f"${TOKEN_ENV}"
    if not token:
        raise UsageError(f"the kronos worker needs a token that clients must send: set {TOKEN_ENV} (e.g. export "
                         f"{TOKEN_ENV}=$(python -c 'import secrets; print(secrets.token_urlsafe(32))')), or pass "
                         "--token-file, and give clients the same value")
    if len(token) < 16:
        raise UsageError(f"the token from {where} is {len(token)} characters; use at least 16")
    return token


def _gpus(flag: str | None, simulated: bool) -> tuple[str, ...]:
    from ytk_core.errors import UsageError

    if flag is not None:
        ids = tuple(g.strip() for g in flag.split(",") if g.strip())
        if not ids or not all(g.isdigit() for g in ids):
            raise UsageError(f"--gpus {flag!r}: expected GPU indices, e.g. 0,1")
        return ids
    if simulated:
        return ()
    try:
        import torch

        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:
        n = 0
    return tuple(str(i) for i in range(n)) if n > 1 else ()


def serve(settings: WorkerSettings, host: str, port: int) -> None:
    from ytk_core.runtime import runtime
    from ytk_hookspecs.service.server import listen, serve_on
    from ytk_hookspecs.service.store import state_dir_lock

    from .app import create_app, worker_info

    log = runtime().log.bind(component="kronos")
    with state_dir_lock(settings.state_dir):  # held while the worker runs
        sock = listen(host, port)
        info = worker_info(settings)
        if not info.engine_available:
            log.warning(f"the {settings.engine} engine cannot run here: {info.engine_reason}; jobs will fail")
        app = create_app(settings, info, log)
        log.info(f"kronos worker on http://{host}:{port}", engine=settings.engine, slots=settings.slots,
                 arch=info.arch, max_upload_mb=round(settings.max_upload_bytes / MB, 3))
        serve_on(app, sock)

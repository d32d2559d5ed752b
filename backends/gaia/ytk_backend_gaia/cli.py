"""``ytk worker gaia``: start the Gaia service (uvicorn) on this machine."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from .errors import GaiaUsageError as ServiceUsageError
from .protocol import DEFAULT_PORT
from .settings import MB, ServiceSettings

KEY_ENV = "YTK_GAIA_API_KEY"
RAY_ENV = "YTK_GAIA_RAY"
MIN_KEY = 16


def add_commands(cli: Any) -> None:
    @cli.worker.command("gaia")
    def gaia(
        host: Annotated[str, typer.Option("--host", help="address to listen on (0.0.0.0: every interface)")
                        ] = "127.0.0.1",
        port: Annotated[int, typer.Option("--port", help="port to listen on")] = DEFAULT_PORT,
        state_dir: Annotated[Optional[Path], typer.Option(
            "--state-dir", help="where job records, uploads and results live (default: <ytk cache>/gaia-service); "
            "a restarted service knows the jobs recorded here and runs again those it had not finished",
            show_default=False)] = None,
        keys_file: Annotated[Optional[Path], typer.Option(
            "--keys-file", help=f"API keys, one `NAME KEY` per line (NAME: who holds it); else ${KEY_ENV} (one key, "
            "named default), else [workers] gaia_api_key in ytk.toml", show_default=False)] = None,
        generator: Annotated[Optional[list[str]], typer.Option(
            "--generator", help="kernel generator to offer (repeatable; the first is the default): an installed "
            "kernelgen backend such as templates or mock (default: every installed one that can run here)",
            show_default=False)] = None,
        builder: Annotated[str, typer.Option("--builder", help="plugin builder to run builds with: an installed "
                                             "builder backend (nvcc, mock, ...); `none` offers no builds")] = "nvcc",
        max_upload_mb: Annotated[float, typer.Option("--max-upload-mb", help="largest job archive (MiB)")] = 512,
        max_extract_mb: Annotated[float, typer.Option("--max-extract-mb", help="largest job unpacked (MiB)")] = 2048,
        max_members: Annotated[int, typer.Option("--max-members", help="most files in one job archive")] = 64,
        max_active_per_key: Annotated[int, typer.Option(
            "--max-active-per-key", help="queued + running jobs one key may have; more are answered 429 and the "
            "client waits")] = 8,
        slots: Annotated[int, typer.Option("--slots", help="jobs run at once without Ray (one per GPU with "
                                           "--gpus)")] = 1,
        gpus: Annotated[Optional[str], typer.Option(
            "--gpus", help="GPU indices for the local queue, one job at a time on each, e.g. 0,1",
            show_default=False)] = None,
        ray: Annotated[Optional[str], typer.Option(
            "--ray", help=f"dispatch every job as a Ray task: a cluster's address (auto, HOST:PORT, ray://HOST:PORT) "
            f"or `local` (start Ray on this machine); else ${RAY_ENV}, else [workers] gaia_ray in ytk.toml; "
            "without it, jobs run in this service's own queue", show_default=False)] = None,
        ray_num_gpus: Annotated[float, typer.Option("--ray-num-gpus", help="GPUs each job's Ray task asks for")] = 1.0,
        ray_num_cpus: Annotated[float, typer.Option("--ray-num-cpus", help="CPUs each job's Ray task asks for")] = 1.0,
        ray_max_retries: Annotated[int, typer.Option(
            "--ray-max-retries", help="how often Ray runs a job again whose worker process died")] = 3,
        keep_days: Annotated[float, typer.Option(
            "--keep-days", help="delete a finished job's folder (upload, log, results) this many days after it "
            "finished")] = 7.0,
    ) -> None:
        """Serve Gaia: kernel generation and plugin builds over HTTP. Clients select it with --kernelgen gaia /
        --builder gaia (YTK_GAIA_URL, YTK_GAIA_API_KEY). The OpenAPI document is at /openapi.json, interactive
        docs at /docs."""
        settings = build_settings(
            state_dir=state_dir, keys_file=keys_file, generators=generator, builder=builder,
            max_upload_mb=max_upload_mb, max_extract_mb=max_extract_mb, max_members=max_members,
            max_active_per_key=max_active_per_key, slots=slots, gpus=gpus, ray=ray, ray_num_gpus=ray_num_gpus,
            ray_num_cpus=ray_num_cpus, ray_max_retries=ray_max_retries, keep_days=keep_days)
        serve(settings, host, port)


def _workers_table() -> dict[str, Any]:
    from ytk_hookspecs.project_config import find_config

    try:
        path = find_config()
        data = tomllib.loads(path.read_text()) if path is not None else {}
    except (ValueError, OSError) as e:
        raise ServiceUsageError(str(e)) from None
    table = data.get("workers") or {}
    return table if isinstance(table, dict) else {}


def default_state_dir() -> Path:
    """``<ytk cache>/gaia-service``: the cache ytk keeps kernel jobs in ($YTK_CACHE_DIR, else XDG)."""
    cache = os.environ.get("YTK_CACHE_DIR") or str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                                                    / "ytk")
    return Path(cache) / "gaia-service"


def build_settings(*, state_dir: Path | None, keys_file: Path | None, generators: list[str] | None, builder: str,
                   max_upload_mb: float, max_extract_mb: float, max_members: int, max_active_per_key: int,
                   slots: int, gpus: str | None, ray: str | None, ray_num_gpus: float, ray_num_cpus: float,
                   ray_max_retries: int, keep_days: float = 7.0) -> ServiceSettings:
    if min(max_upload_mb, max_extract_mb) <= 0 or max_members < 1 or max_active_per_key < 1 or slots < 1:
        raise ServiceUsageError("--max-upload-mb and --max-extract-mb must be positive; --max-members, "
                                "--max-active-per-key and --slots at least 1")
    if keep_days <= 0:
        raise ServiceUsageError("--keep-days must be positive")
    if min(ray_num_gpus, ray_num_cpus) < 0 or ray_max_retries < 0:
        raise ServiceUsageError("--ray-num-gpus, --ray-num-cpus and --ray-max-retries cannot be negative")
    gpu_ids = tuple(g.strip() for g in (gpus or "").split(",") if g.strip())
    if gpus is not None and (not gpu_ids or not all(g.isdigit() for g in gpu_ids)):
        raise ServiceUsageError(f"--gpus {gpus!r}: expected GPU indices, e.g. 0,1")
    workers = _workers_table()
    # the first given of --ray, $YTK_GAIA_RAY, [workers] gaia_ray, and where it came from (error lines name it)
    given = [(ray, "--ray"), (os.environ.get(RAY_ENV), f"${RAY_ENV}"),
             (workers.get("gaia_ray"), "[workers] gaia_ray in ytk.toml")]
    ray_address, ray_source = next(((str(v), src) for v, src in given if v), (None, "--ray"))
    if ray_address:
        _check_ray()
    gens, build = _backends(generators, None if builder == "none" else builder)
    return ServiceSettings(state_dir=(state_dir or default_state_dir()).resolve(), keys=_keys(keys_file, workers),
                           generators=gens, builder=build, max_upload_bytes=int(max_upload_mb * MB),
                           max_extract_bytes=int(max_extract_mb * MB), max_members=max_members,
                           max_active_per_key=max_active_per_key, slots=slots, gpus=gpu_ids, ray_address=ray_address,
                           ray_source=ray_source,
                           ray_num_gpus=ray_num_gpus, ray_num_cpus=ray_num_cpus, ray_max_retries=ray_max_retries,
                           keep_days=keep_days)


def _check_ray() -> None:
    try:
        import ray  # noqa: F401
    except ImportError:
        raise ServiceUsageError("--ray needs Ray on this machine: pip install 'ytk-backend-gaia[ray]' (or "
                                "pip install ray==2.58.0)") from None


def _keys(keys_file: Path | None, workers: dict[str, Any]) -> dict[str, str]:
    if keys_file is not None:
        try:
            lines = keys_file.read_text().splitlines()
        except OSError as e:
            raise ServiceUsageError(f"--keys-file {keys_file}: cannot read it: {e.strerror or e}") from None
        keys: dict[str, str] = {}
        for n, line in enumerate(lines, start=1):
            parts = line.split("#", 1)[0].split()
            if not parts:
                continue
            if len(parts) != 2:
                raise ServiceUsageError(f"--keys-file {keys_file}:{n}: expected `NAME KEY`, got {len(parts)} field(s)")
            name, key = parts
            if name in keys:
                raise ServiceUsageError(f"--keys-file {keys_file}:{n}: key name {name!r} appears twice")
            same = next((other for other, k in keys.items() if k == key), None)
            if same is not None:  # a request would be counted as the first name's: quotas and the log
                raise ServiceUsageError(f"--keys-file {keys_file}:{n}: {name!r} has the same key as {same!r}; "
                                        "give each holder a key of their own")
            keys[name] = key
        where = f"--keys-file {keys_file}"
    else:
        key = os.environ.get(KEY_ENV) or str(workers.get("gaia_api_key", ""))
        keys = {"default": key} if key else {}
        where = f"${KEY_ENV}"
    if not keys:
        raise ServiceUsageError(f"the gaia service needs API keys clients must send: set {KEY_ENV} (e.g. export "
                                f"{KEY_ENV}=$(python -c 'import secrets; print(secrets.token_urlsafe(32))')), or pass "
                                "--keys-file, and give clients the same value")
    short = [n for n, k in keys.items() if len(k) < MIN_KEY]
    if short:
        raise ServiceUsageError(f"the key(s) {', '.join(short)} from {where} are shorter than {MIN_KEY} characters")
    return keys


def _backends(generators: list[str] | None, builder: str | None) -> tuple[tuple[str, ...], str | None]:
    """The generators and builder the flags name, each checked installed (and never gaia itself)."""
    from ytk_hookspecs.loader import PluginLoader

    loader = PluginLoader()
    loader.add_entry_points()
    loader.collect()
    installed = {b.name for b in loader.for_role("kernelgen")} - {"gaia"}
    builders = {b.name for b in loader.for_role("builder")} - {"gaia"}
    if generators:
        bad = [g for g in generators if g not in installed]
        if bad:
            raise ServiceUsageError(f"--generator {', '.join(bad)}: not an installed kernel generator (the service "
                                    f"runs: {', '.join(sorted(installed)) or 'none'})")
        gens = tuple(dict.fromkeys(generators))
    else:  # the ones that can run here, best first (their own automatic rank)
        ranked = sorted((b for b in loader.for_role("kernelgen") if b.name in installed),
                        key=lambda b: (-b.info.auto_priority.get("kernelgen", -1), b.name))
        gens = tuple(b.name for b in ranked if b.availability().available)
    if builder is not None and builder not in builders:
        raise ServiceUsageError(f"--builder {builder}: not an installed plugin builder (the service runs: "
                                f"{', '.join(sorted(builders)) or 'none'}; `none` offers no builds)")
    return gens, builder


def serve(settings: ServiceSettings, host: str, port: int) -> None:
    import structlog
    from ytk_hookspecs.service.server import listen, serve_on
    from ytk_hookspecs.service.store import state_dir_lock

    from .app import create_app

    # the ytk CLI configured structlog (console or JSON lines on stderr, -v, --log-format): follow it
    log = structlog.get_logger("ytk").bind(component="gaia")
    with state_dir_lock(settings.state_dir):  # held while the service runs
        sock = listen(host, port)
        app = create_app(settings, log)
        if settings.ray_address:  # here, not in the app's start-up: a cluster that cannot be had is one line
            try:
                app.state.dispatcher.start()
            except BaseException:
                sock.close()
                raise
        slots = len(settings.gpus) or settings.slots
        where = f"Ray at {settings.ray_address}" if settings.ray_address else f"{slots} slot(s)"
        log.info(f"gaia service on http://{host}:{port}", generators=",".join(settings.generators) or "none",
                 builder=settings.builder or "none", jobs=where, keys=len(settings.keys))
        serve_on(app, sock)

"""How a Gaia service was started: its state folder, keys, backends, limits and where jobs run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

MB = 1 << 20


@dataclass(frozen=True)
class ServiceSettings:
    state_dir: Path
    #: key name -> secret; a key's name is who holds it (quotas and the log use it)
    keys: dict[str, str]
    #: the kernel generators offered, the first being the default
    generators: tuple[str, ...]
    builder: str | None
    max_upload_bytes: int = 512 * MB
    max_extract_bytes: int = 2048 * MB
    max_members: int = 64
    #: queued + running jobs one key may have at once; more is a 429 (the client waits and retries)
    max_active_per_key: int = 8
    #: local jobs at once (without --gpus); with --gpus, one per GPU
    slots: int = 1
    gpus: tuple[str, ...] = ()
    #: None: the in-process queue; "local": a Ray instance started here; else a cluster's address
    ray_address: str | None = None
    #: where the address came from, as error lines name it: --ray, $YTK_GAIA_RAY or [workers] gaia_ray
    ray_source: str = "--ray"
    ray_num_gpus: float = 1.0
    ray_num_cpus: float = 1.0
    ray_max_retries: int = 3

    #: finished jobs (records, uploads, logs, results) are deleted this many days after they finished
    keep_days: float = 7.0

    @property
    def jobs_dir(self) -> Path:
        return self.state_dir / "jobs"

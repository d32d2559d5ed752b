"""What a backend declares about itself when it registers."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .base import Versioned

__all__ = ["Role", "Stage", "ROLE_STAGES", "SELECTABLE_ROLES", "Availability", "CORE_CONFIG_KEYS",
           "FORWARDED_CONFIG_KEYS", "BackendInfo"]


Role = Literal["engine", "kernelgen", "builder", "frontend"]
Stage = Literal["trace", "carve", "kernelgen", "build_plugin", "compile", "profile"]

#: The flow stages each role serves (what `ytk backends` lists under "stages"; display only: a backend implements
#: the methods of its role's protocol in ytk_hookspecs.roles, not per-stage hooks).
ROLE_STAGES: dict[str, tuple[str, ...]] = {
    "engine": ("compile", "profile"),
    "kernelgen": ("kernelgen",),
    "builder": ("build_plugin",),
    "frontend": ("trace", "carve"),
}

#: The roles a user picks with --engine/--kernelgen/--builder (frontend is the core's own).
SELECTABLE_ROLES: tuple[str, ...] = ("engine", "kernelgen", "builder")


class Availability(BaseModel):
    """Whether a backend can run on this machine, and if not, why (one short sentence)."""

    model_config = ConfigDict(extra="forbid")

    available: bool
    reason: str = ""
    details: dict[str, str] = Field(default_factory=dict)
    needs_gpu: bool = Field(False, description="unavailable only for want of a (matching) CUDA GPU here: on a "
                            "machine with one it would run with nothing to configure (a simulated run asks such "
                            "generators what they would take)")


#: ``--config`` keys the core itself reads for every kernel generator: it turns them into the typed
#: fields of :class:`~ytk_hookspecs.models.KernelGenRequest` (``deployment_target``, ``reoptimize``) and
#: never passes them on in ``config``.
CORE_CONFIG_KEYS: dict[str, str] = {
    "deployment_target": "what the kernel is for; `tensorrt` (required): a plugin around the launcher ABI",
    "reoptimize": "1: the region is plugged already; search harder and fail unless the kernel beats it",
    "ms_to_beat": "the engine's time for the region's layers (ms) a re-optimised kernel must beat",
    "kernel_ms_to_beat": "the kept kernel's own time per site (ms) a re-optimised kernel must beat",
}


#: A ``config_keys`` entry saying the backend forwards jobs to another generator (a service) and checks
#: the keys against that one itself, before a job is sent; the core then leaves the keys to it.
FORWARDED_CONFIG_KEYS = "*"


class BackendInfo(Versioned):
    """A backend's self-description: the ``info`` of every object a plugin registers (:mod:`ytk_hookspecs.roles`).

    ``auto_priority`` maps a role to the backend's rank in the automatic choice for that role
    (highest available wins); a role missing from it is never chosen automatically, so installing
    a third-party backend never silently changes what ytk picks.
    """

    name: str = Field(pattern=r"^[a-z][a-z0-9_-]*$")
    roles: list[Role]
    description: str
    version: str = "0"
    simulated: bool = False
    auto_priority: dict[Role, int] = Field(default_factory=dict)
    config_keys: dict[str, str] = Field(
        default_factory=dict, description="kernelgen: the ``--config`` keys this backend reads, each with what it "
        "does; the core refuses any other key (beside its own, :data:`CORE_CONFIG_KEYS`) before a job is sent")

    def stages(self) -> list[str]:
        out: list[str] = []
        for r in self.roles:
            out.extend(s for s in ROLE_STAGES[r] if s not in out)
        return out

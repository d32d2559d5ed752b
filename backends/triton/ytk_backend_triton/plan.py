"""A launch plan: what a region's compiled Triton kernels do at each site shape, replayable from C.

A region compiled by the torch compiler runs as a fixed sequence of Triton kernel launches for a given
input shape. The plan records that sequence in terms the plugin's launcher understands: per kernel its
binary for each target SM and its parameter list (read from its PTX entry); per site shape the
extents that select it, the launches (grid, block, shared memory) and where each argument comes from --
a plugin input or output (plus a byte offset), the workspace (intermediate buffers, laid out by the
plan), or a scalar. The launcher (:mod:`ytk_backend_triton.launcher`) replays it with the driver API.
"""

from __future__ import annotations

import base64
import re
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ytk_hookspecs.models.base import Versioned
from ytk_hookspecs.models.kernel import C_IDENTIFIER

#: PTX parameter types -> the C type the launcher stores the argument in
PTX_CTYPES = {"u64": "uint64_t", "s64": "int64_t", "u32": "uint32_t", "s32": "int32_t", "b32": "uint32_t",
              "b64": "uint64_t", "f32": "float", "f64": "double", "u16": "uint16_t", "s16": "int16_t",
              "b16": "uint16_t", "u8": "uint8_t", "s8": "int8_t", "b8": "uint8_t"}
_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$][\w$]*)\s*\(([^)]*)\)", re.S)
_PARAM = re.compile(r"\.param\s+\.(\w+)(\s+\.ptr)?")


class PlanError(ValueError):
    """A plan that cannot be launched as written (the message says what and where)."""


class PtxParam(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    ptx_type: str
    pointer: bool

    @property
    def ctype(self) -> str:
        return "void*" if self.pointer else PTX_CTYPES[self.ptx_type]


def ptx_entry(ptx: str, name: str | None = None) -> tuple[str, list[PtxParam]]:
    """The kernel entry's name and its parameters, in order, read from PTX (one ``.entry``, or ``name``)."""
    entries = _ENTRY.findall(ptx)
    if name is not None:
        entries = [e for e in entries if e[0] == name]
    if len(entries) != 1:
        raise PlanError(f"expected one .entry{f' named {name}' if name else ''} in the PTX, found {len(entries)}")
    entry, body = entries[0]
    params = []
    for m in _PARAM.finditer(body):
        t = m.group(1)
        if t not in PTX_CTYPES:
            raise PlanError(f"kernel {entry}: parameter type .{t} is not one the launcher can pass")
        params.append(PtxParam(ptx_type=t, pointer=bool(m.group(2))))
    return entry, params


class KernelBinary(BaseModel):
    """One compiled kernel: its entry, its parameters, and a cubin per SM. ``id`` names it in the plan
    (two shape cases may compile different kernels of one entry name; each loads as its own module)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field("", pattern=r"^[A-Za-z0-9_.-]*$")
    name: str = Field(pattern=C_IDENTIFIER)
    params: list[PtxParam]
    num_warps: int = Field(ge=1, le=32)
    shared_bytes: int = Field(ge=0, description="dynamic shared memory of a launch (where shared_by_sm has none)")
    shared_by_sm: dict[int, int] = Field(default_factory=dict, description="SM -> its build's shared memory, "
                                         "where Triton's build for that SM needs another amount (sm_87 vs sm_90)")
    cubins: dict[int, str] = Field(description="SM -> base64 of the cubin")
    global_scratch_bytes: int = Field(0, ge=0, description="per program; 0: the scratch pointer is passed null")
    profile_scratch_bytes: int = Field(0, ge=0)
    user_params: int = Field(ge=0, description="parameters the caller binds; the rest are Triton's scratch pointers")

    @model_validator(mode="after")
    def _hidden_are_pointers(self) -> "KernelBinary":
        if not self.id:
            self.id = self.name
        if self.user_params > len(self.params):
            raise ValueError(f"kernel {self.name}: {self.user_params} user parameters but its entry has "
                             f"{len(self.params)}")
        for p in self.params[self.user_params:]:
            if p.ptx_type not in ("u64", "b64"):
                raise ValueError(f"kernel {self.name}: a trailing (scratch) parameter of type .{p.ptx_type}")
        if self.global_scratch_bytes or self.profile_scratch_bytes:
            raise ValueError(f"kernel {self.name} needs Triton scratch memory, which plans do not lay out yet")
        if set(self.shared_by_sm) - set(self.cubins):
            raise ValueError(f"kernel {self.name}: shared memory given for sm {sorted(set(self.shared_by_sm))}, "
                             f"cubins for {sorted(self.cubins)}")
        return self

    def shared(self, sm: int) -> int:
        return self.shared_by_sm.get(sm, self.shared_bytes)

    def cubin(self, sm: int) -> bytes:
        if sm not in self.cubins:
            raise PlanError(f"kernel {self.name} has no cubin for sm_{sm} (it has {sorted(self.cubins)})")
        return base64.b64decode(self.cubins[sm])


class Arg(BaseModel):
    """Where one user parameter of a launch comes from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["input", "output", "workspace", "scalar"]
    index: int = Field(0, ge=0, description="the plugin input/output it points into")
    offset: int = Field(0, ge=0, description="bytes from the start of that tensor or of the workspace")
    value: int | float = 0


class Launch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kernel: str
    grid: tuple[int, int, int]
    args: list[Arg]

    @field_validator("grid")
    @classmethod
    def _grid(cls, v: tuple[int, int, int]) -> tuple[int, int, int]:
        if min(v) < 1 or v[0] > 2**31 - 1 or max(v[1:]) > 65535:
            raise ValueError(f"grid {v} is outside CUDA's limits")
        return v


class ShapeCase(BaseModel):
    """The launches for one set of extent values (the plugin's sites that share these shapes)."""

    model_config = ConfigDict(extra="forbid")

    extents: list[int]
    workspace_bytes: int = Field(0, ge=0)
    launches: list[Launch] = Field(min_length=1)


class LaunchPlan(Versioned):
    """Schema 2 added a kernel's ``shared_by_sm``."""

    SCHEMA_VERSION: ClassVar[int] = 2

    kernels: list[KernelBinary] = Field(min_length=1)
    cases: list[ShapeCase] = Field(min_length=1)
    n_inputs: int = Field(ge=1)
    n_outputs: int = Field(ge=1)
    triton_version: str = ""

    @model_validator(mode="after")
    def _consistent(self) -> "LaunchPlan":
        ids = [k.id for k in self.kernels]
        if len(set(ids)) != len(ids):
            raise ValueError(f"two kernels share an id: {sorted(n for n in ids if ids.count(n) > 1)}")
        by = {k.id: k for k in self.kernels}
        sms = {frozenset(k.cubins) for k in self.kernels}
        if len(sms) != 1:
            raise ValueError("the kernels were not all compiled for the same SMs")
        widths = {len(c.extents) for c in self.cases}
        if len(widths) != 1:
            raise ValueError("shape cases with different numbers of extents")
        keys = [tuple(c.extents) for c in self.cases]
        if len(set(keys)) != len(keys):
            raise ValueError("two shape cases for the same extents")
        for ci, case in enumerate(self.cases):
            for li, launch in enumerate(case.launches):
                where = f"case {ci} launch {li}"
                k = by.get(launch.kernel)
                if k is None:
                    raise ValueError(f"{where}: no kernel {launch.kernel!r}")
                if len(launch.args) != k.user_params:
                    raise ValueError(f"{where}: {len(launch.args)} arguments for {k.name}'s {k.user_params}")
                for ai, (a, p) in enumerate(zip(launch.args, k.params)):
                    if (a.kind != "scalar") != p.pointer:
                        raise ValueError(f"{where} argument {ai}: a {a.kind} for a "
                                         f"{'pointer' if p.pointer else p.ptx_type} parameter")
                    limit = {"input": self.n_inputs, "output": self.n_outputs}.get(a.kind)
                    if limit is not None and a.index >= limit:
                        raise ValueError(f"{where} argument {ai}: {a.kind} {a.index} of {limit}")
                    if a.kind == "workspace" and a.offset >= max(case.workspace_bytes, 1):
                        raise ValueError(f"{where} argument {ai}: workspace offset {a.offset} past "
                                         f"{case.workspace_bytes} bytes")
        return self

    @property
    def sms(self) -> list[int]:
        return sorted(self.kernels[0].cubins)

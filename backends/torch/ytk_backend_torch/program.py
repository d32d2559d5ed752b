"""An engine plan made executable on one device: a flat list of steps over numbered tensor slots.

The step list is the engine: the per-layer profile times each step, the benchmark captures the
whole list in one CUDA graph. Inputs are taken as the user gives them (float32, NCHW) and reformatted
by the engine's first steps into its own precision and layout (fp16, channels_last for 4-D), outputs
are reformatted back to float32 row-major by its last, as a TensorRT engine with fp32 bindings does.
Intermediate tensors are released after their last reader, so memory (and a captured graph's
pool) holds only what is live.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ytk_hookspecs.errors import StageError

from .onnx_graph import Node
from .ops import OPS, NodeCtx, to_compute
from .plan import DTYPES, EnginePlan, restore_attrs
from .plugin_nodes import PluginBinding, build_plugin_runtime


@dataclass
class Step:
    name: str
    type: str
    onnx_nodes: list[str]
    fn: Callable[..., Any]
    in_slots: list[int | None]
    out_slots: list[int | None]
    free: list[int] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    kind: str = "op"  # "plugin" for a custom-op node run by its plugin .so

    def run(self, env: list[Any]) -> None:
        """Run this step on the slot list ``env``: read its inputs, write its outputs."""
        res = self.fn(*[env[j] if j is not None else None for j in self.in_slots])
        if isinstance(res, (tuple, list)):
            for j, r in zip(self.out_slots, res):
                if j is not None:
                    env[j] = r
        else:
            env[self.out_slots[0]] = res  # type: ignore[index]

    @property
    def metadata(self) -> str:
        # TensorRT 10 writes the ONNX node(s) of a layer this way; propose reads it when present.
        return "\x1e".join(f"[ONNX Layer: {n}]" for n in self.onnx_nodes)


def _input_reformat(dtype: torch.dtype, rank: int) -> Callable[[torch.Tensor], torch.Tensor]:
    fmt = torch.channels_last if rank == 4 else torch.contiguous_format
    return lambda x: x.to(dtype=dtype, memory_format=fmt)


def _output_reformat(x: torch.Tensor) -> torch.Tensor:
    if x.is_floating_point():
        return x.to(dtype=torch.float32, memory_format=torch.contiguous_format)
    return x.contiguous()


class Program:
    """Executable form of an :class:`EnginePlan` on ``device``."""

    def __init__(self, plan: EnginePlan, constants: dict[str, torch.Tensor], bindings: dict[str, PluginBinding],
                 device: str | torch.device, libs: dict[str, Any] | None = None) -> None:
        self.plan = plan
        self.device = torch.device(device)
        self.float_dtype = plan.float_dtype
        self.libs: dict[str, Any] = libs if libs is not None else {}
        slots: dict[str, int] = {}

        def slot(name: str) -> int:
            if name not in slots:
                slots[name] = len(slots)
            return slots[name]

        self.steps: list[Step] = []
        self.const_slots: dict[int, torch.Tensor] = {}
        data_consts = {n for n, uses in plan.const_use.items() if "data" in uses}
        for n in data_consts:
            self.const_slots[slot(n)] = to_compute(constants[n], self.float_dtype).to(self.device)
        first_reader = self._first_readers(plan)
        self.input_slots: list[int] = []
        for gi in plan.inputs:
            raw = slot(f"{gi.name}::binding")
            self.input_slots.append(raw)
            dt = DTYPES[gi.dtype]
            if not dt.is_floating_point:
                slots[gi.name] = raw
                continue
            reader, pos = first_reader.get(gi.name, ("", 0))
            self.steps.append(Step(f"Reformatting CopyNode for Input Tensor {pos} to {reader}", "Reformat", [],
                                   _input_reformat(self.float_dtype, len(gi.shape)), [raw], [slot(gi.name)],
                                   inputs=[gi.name], outputs=[gi.name]))
        for layer in plan.layers:
            node = Node.from_dict({**layer.node, "attrs": restore_attrs(layer.node["attrs"])})
            fn, runtime_idx = self._build(node, layer.kind, constants, bindings)
            ins = [slot(n) if (n and i in runtime_idx) else None for i, n in enumerate(node.inputs)]
            outs = [slot(o) if o else None for o in node.outputs]
            self.steps.append(Step(layer.name, layer.type, layer.onnx_nodes, fn, ins, outs,
                                   inputs=[n for n in node.inputs if n], outputs=[o for o in node.outputs if o],
                                   kind=layer.kind))
        producer = {o: s for s in self.steps for o in s.outputs}
        self.output_slots: list[int] = []
        for k, go in enumerate(plan.outputs):
            src = slot(go.name)
            p = producer.get(go.name)
            pos = p.outputs.index(go.name) if p else 0
            out = slot(f"{go.name}::binding")
            self.steps.append(Step(f"Reformatting CopyNode for Output Tensor {pos} to {p.name if p else go.name}",
                                   "Reformat", [], _output_reformat, [src], [out], inputs=[go.name],
                                   outputs=[go.name]))
            self.output_slots.append(out)
        self.n_slots = len(slots)
        self._plan_frees()

    # -- construction ---------------------------------------------------------------------------
    @staticmethod
    def _first_readers(plan: EnginePlan) -> dict[str, tuple[str, int]]:
        out: dict[str, tuple[str, int]] = {}
        for layer in plan.layers:
            for i, n in enumerate(layer.node["inputs"]):
                if n and n not in out:
                    out[n] = (layer.name, i)
        return out

    def _shape(self, name: str, constants: dict[str, torch.Tensor]) -> tuple[int, ...] | None:
        if name in constants:
            return tuple(constants[name].shape)
        v = self.plan.values.get(name)
        return tuple(v.shape) if v else None

    def _dtype(self, name: str, constants: dict[str, torch.Tensor]) -> torch.dtype | None:
        if name in constants:
            return constants[name].dtype
        v = self.plan.values.get(name)
        if v is None:
            return None
        d = DTYPES[v.dtype]
        return self.float_dtype if d.is_floating_point else d

    def _build(self, node: Node, kind: str, constants: dict[str, torch.Tensor],
               bindings: dict[str, PluginBinding]) -> tuple[Callable[..., Any], set[int]]:
        consts = [constants.get(n) if n else None for n in node.inputs]
        shapes = [self._shape(n, constants) if n else None for n in node.inputs]
        if kind == "plugin":
            b = bindings.get(node.name)
            if b is None:
                raise StageError(f"engine plan: custom-op node {node.name!r} has no plugin binding")
            fn = build_plugin_runtime(node, b, consts, [list(s or ()) for s in shapes], self.float_dtype,
                                      self.device, self.libs)
            return fn, {i for i, n in enumerate(node.inputs) if n and n not in constants}
        od = OPS.get(node.op_type)
        if od is None:
            raise StageError(f"engine plan: op {node.op_type} of layer {node.name!r} is unknown to this version "
                             "of the torch engine; compile the engine again")
        dtypes = [self._dtype(n, constants) if n else None for n in node.inputs]
        ctx = NodeCtx(node, consts, shapes, dtypes, self.float_dtype, self.device, "engine plan", self.plan.opset)
        bt = od.build_time()
        return od.build(ctx), {i for i in range(len(node.inputs)) if i not in bt}

    def _plan_frees(self) -> None:
        last: dict[int, int] = {}
        for k, s in enumerate(self.steps):
            for j in s.in_slots:
                if j is not None:
                    last[j] = k
        keep = set(self.const_slots) | set(self.output_slots)
        for j, k in last.items():
            if j not in keep:
                self.steps[k].free.append(j)

    # -- execution --------------------------------------------------------------------------------
    def new_env(self, inputs: Sequence[torch.Tensor]) -> list[Any]:
        """The slot list a run starts from: constants and the inputs in place, every other slot empty."""
        env: list[Any] = [None] * self.n_slots
        for j, t in self.const_slots.items():
            env[j] = t
        for j, t in zip(self.input_slots, inputs):
            env[j] = t
        return env

    def prepare_inputs(self, arrays: Sequence[Any]) -> list[torch.Tensor]:
        """Host arrays (numpy, in plan input order) as device tensors in their binding dtypes."""
        out = []
        for gi, a in zip(self.plan.inputs, arrays):
            t = torch.as_tensor(a).to(DTYPES[gi.dtype])
            if list(t.shape) != gi.shape:
                raise StageError(f"input {gi.name!r} has shape {list(t.shape)}; the engine was built for {gi.shape}")
            out.append(t.to(self.device).contiguous())
        return out

    def forward(self, inputs: Sequence[torch.Tensor],
                after_step: Callable[[int], None] | None = None) -> list[torch.Tensor]:
        """Run every step; ``after_step(k)`` is called after step ``k`` is enqueued (for timing)."""
        env = self.new_env(inputs)
        for k, s in enumerate(self.steps):
            s.run(env)
            for j in s.free:
                env[j] = None
            if after_step is not None:
                after_step(k)
        return [env[j] for j in self.output_slots]

    __call__ = forward

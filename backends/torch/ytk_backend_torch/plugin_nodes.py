"""Custom-op nodes: matching them to plugin .so files, checking the contract, and running them.

A carved region is one ONNX node (domain ``trt.plugins``, op_type = plugin name, attributes
``plugin_namespace`` / ``plugin_version``) whose inputs are the region's activations followed by
its lifted weights. It runs through the plugin's extern "C" launcher via the nvcc backend's
:func:`torch_launch`, fed exactly what the plugin's ``plugin_meta`` declares: activations in the
declared dtype and layout (kHWC8 = channels_last), weights cast once at build time, outputs
allocated from the contract's shape expressions.
"""

from __future__ import annotations

import platform
from typing import Any

import torch
import yaml
from pydantic import BaseModel, ConfigDict

from ytk_hookspecs import shape_expr
from ytk_hookspecs.contract import layout_error
from ytk_hookspecs.errors import ContractViolation, StageError
from ytk_hookspecs.models import PLUGIN_DOMAIN, PluginArtifact, PluginMeta
from ytk_hookspecs.models.base import sha256_file

from .onnx_graph import Node

TORCH_DTYPES = {"float16": torch.float16, "float32": torch.float32, "int32": torch.int32, "int8": torch.int8}
_MACHINES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


class PluginBinding(BaseModel):
    """A plugin as the engine plan records it: which file, which hash, which contract."""

    model_config = ConfigDict(extra="forbid")

    name: str
    namespace: str
    version: str
    path: str
    sha256: str
    sm: int
    cpu_arch: str
    meta_yaml: str

    def meta(self) -> PluginMeta:
        return PluginMeta.model_validate(yaml.safe_load(self.meta_yaml))


def is_custom_node(node: Node, plugin_names: set[str]) -> bool:
    return node.domain == PLUGIN_DOMAIN or (node.domain in ("", "ai.onnx") and node.op_type in plugin_names)


def node_key(node: Node) -> tuple[str, str, str]:
    return (str(node.attrs.get("plugin_namespace", "")), node.op_type, str(node.attrs.get("plugin_version", "1")))


def bind_plugins(nodes: list[Node], plugins: list[PluginArtifact]) -> dict[str, PluginBinding]:
    """Map every custom-op node to the plugin that executes it (by namespace, name, version).

    The core has matched nodes to plugins before calling the engine; this is the engine's own
    check of what it can run, so a plugin built for a CPU engine is refused here, at compile.
    """
    by_key: dict[tuple[str, str, str], PluginArtifact] = {}
    for p in plugins:
        d = p.description
        by_key[(d.namespace, d.name, d.version)] = p
    names = {p.description.name for p in plugins}
    out: dict[str, PluginBinding] = {}
    for node in nodes:
        if not is_custom_node(node, names):
            continue
        key = node_key(node)
        art = by_key.get(key)
        if art is None:
            have = ", ".join(f"{k[0]}::{k[1]} v{k[2]}" for k in by_key) or "none"
            raise StageError(
                f"custom-op node {node.name!r} needs plugin {key[0]}::{key[1]} version {key[2]}, and no supplied "
                f"plugin provides it (supplied: {have}). Pass its .so with --custom-plugin.")
        d = art.description
        if d.engine_api != "torch-launcher":
            raise StageError(
                f"plugin {d.namespace}::{d.name} ({art.path}) was built for engine API {d.engine_api!r}; the torch "
                "engine runs plugins through the extern \"C\" launcher and needs engine_api 'torch-launcher'. "
                + ("The mock builder's plugins run on the simulated CPU target only; "
                   if d.engine_api == "mock-cpu" else "")
                + "rebuild it with a builder that targets the torch engine (e.g. --builder nvcc).")
        try:
            meta = d.plugin_meta()
        except (ValueError, TypeError) as e:  # pydantic's ValidationError and a YAML error are ValueErrors
            raise StageError(f"plugin {d.name!r} ({art.path}) carries no readable plugin_meta in its self-description "
                             f"({type(e).__name__}); rebuild it with `ytk embedded build-plugin`.") from None
        n_in = len([x for x in node.inputs if x])
        n_out = len([x for x in node.outputs if x])
        if n_in != len(meta.inputs) or n_out != len(meta.outputs):
            raise ContractViolation(
                f"custom-op node {node.name!r} has {n_in} input(s) and {n_out} output(s); plugin {d.name!r} declares "
                f"{len(meta.inputs)} and {len(meta.outputs)} (lifted weights count as inputs).")
        out[node.name] = PluginBinding(name=d.name, namespace=d.namespace, version=d.version, path=str(art.path),
                                       sha256=art.sha256, sm=d.sm, cpu_arch=d.cpu_arch, meta_yaml=d.meta_yaml)
    return out


def contract_shapes(node: Node, meta: PluginMeta, in_shapes: list[list[int]]) -> list[list[int]]:
    """Check the node's input shapes against the contract; return the output shapes it declares."""
    try:
        ext = shape_expr.evaluate_extents(meta.extents, in_shapes)
        for i, (shp, c) in enumerate(zip(in_shapes, meta.inputs)):
            want = [shape_expr.evaluate(e, in_shapes, ext) for e in c.shape]
            if list(shp) != want:
                raise ContractViolation(f"custom-op node {node.name!r}: input {i} ({c.name}) has shape {list(shp)}, "
                                        f"plugin {meta.plugin_name!r} expects {want}")
            why = layout_error(c.format, list(shp))
            if why:
                raise ContractViolation(f"custom-op node {node.name!r}: input {i} ({c.name}) is declared {c.format}: "
                                        f"{why}; it has shape {list(shp)}")
        return [[shape_expr.evaluate(e, in_shapes, ext) for e in c.shape] for c in meta.outputs]
    except shape_expr.ShapeExprError as e:
        raise ContractViolation(f"custom-op node {node.name!r}: plugin {meta.plugin_name!r}: {e}") from None


def check_loadable_here(b: PluginBinding, device: torch.device) -> None:
    """Refuse a plugin that cannot run on this host and GPU, before anything is launched."""
    here = _MACHINES.get(platform.machine().lower(), platform.machine())
    if _MACHINES.get(b.cpu_arch, b.cpu_arch) != here:
        raise StageError(f"plugin {b.name!r} ({b.path}) was built for {b.cpu_arch}; this machine is {here}. "
                         "Rebuild it with an arch spec for this host (build-plugin -a ...).")
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        sm = major * 10 + minor
        if b.sm > sm:
            raise StageError(f"plugin {b.name!r} ({b.path}) was built for sm{b.sm}; this GPU is sm{sm} and cannot "
                             "run it. Rebuild it with an arch spec for this GPU.")


def build_plugin_runtime(node: Node, binding: PluginBinding, consts: list[torch.Tensor | None],
                         in_shapes: list[list[int]], float_dtype: torch.dtype, device: torch.device,
                         libs: dict[str, Any]) -> Any:
    """The runtime callable of one custom-op node (CUDA only)."""
    if device.type != "cuda":
        raise StageError(f"custom-op node {node.name!r} runs plugin {binding.name!r}, a CUDA kernel; the torch "
                         f"engine can only execute it on a CUDA device (asked for {device}).")
    from ytk_hookspecs.launcher import LauncherLibrary, torch_launch

    check_loadable_here(binding, device)
    lib = libs.get(binding.path)
    if lib is None:
        try:
            digest = sha256_file(binding.path)
        except OSError as e:
            raise StageError(f"plugin {binding.name!r}: cannot read {binding.path}: {e.strerror}") from None
        if digest != binding.sha256:
            raise StageError(f"plugin {binding.name!r}: {binding.path} changed since the engine was compiled "
                             "(sha256 differs); compile the engine again.")
        lib = libs[binding.path] = LauncherLibrary(binding.path)
    meta = lib.meta
    out_shapes = contract_shapes(node, meta, in_shapes)
    cl = torch.channels_last
    fixed: list[torch.Tensor | None] = []
    for c, v in zip(meta.inputs, consts):
        if v is None:
            fixed.append(None)
            continue
        t = v.to(TORCH_DTYPES[c.dtype])
        t = t.contiguous(memory_format=cl) if c.format == "kHWC8" else t.contiguous()
        fixed.append(t.to(device))
    in_specs = [(TORCH_DTYPES[c.dtype], c.format == "kHWC8") for c in meta.inputs]
    out_specs = [(shp, TORCH_DTYPES[c.dtype], cl if c.format == "kHWC8" else torch.contiguous_format)
                 for shp, c in zip(out_shapes, meta.outputs)]

    def run(*xs: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        ins = []
        for x, f, (dt, hwc) in zip(xs, fixed, in_specs):
            if f is not None:
                ins.append(f)
                continue
            assert x is not None
            if x.dtype != dt:
                x = x.to(dt)
            ins.append(x.contiguous(memory_format=cl) if hwc else x.contiguous())
        outs = [torch.empty(shp, dtype=dt, device=device, memory_format=mf) for shp, dt, mf in out_specs]
        torch_launch(lib, ins, outs)
        return tuple(o if o.dtype == float_dtype or not o.is_floating_point() else o.to(float_dtype) for o in outs)

    return run

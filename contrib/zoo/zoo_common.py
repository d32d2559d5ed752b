"""What every model file of the zoo shares: importing timm/torchvision on the CPU torch build, building
a model with random (seeded) weights, and the input-size rule.

A model file is three lines::

    from zoo_common import zoo_model

    Model, get_fwd_args = zoo_model("mobilenetv3_large_100")

``Model()`` builds the registry entry's network in eval mode; ``get_fwd_args()`` returns one seeded
``randn`` input of the entry's size: its default (large) size, or ``YTK_EXAMPLE_SIZE=BxHxW`` (the same
convention as ``contrib/models``). A model that only takes its own resolution keeps it: the override's
batch is used, its height and width are replaced by the model's, and a line on stderr says so.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from zoo_registry import ZooEntry, entry

#: Seeds: the weights of every model and its input are the same on every run and machine.
WEIGHT_SEED = 0
INPUT_SEED = 2
CALIBRATION_SEED = 3

_TORCHVISION_SHIM: Any = None  # the Library that keeps the two schemas alive (see below)


def ensure_torchvision_importable() -> None:
    """Make ``import torchvision`` (and so ``import timm``) work on the CPU build of torch.

    PyPI's torchvision 0.28.0 wheel carries a C extension linked against CUDA torch libraries; on
    torch 2.13.0+cpu it fails to load, and torchvision then dies at import with "operator
    torchvision::nms does not exist": its ``_meta_registrations`` registers fake kernels for
    ``torchvision::nms`` and ``::qnms`` unconditionally, and a fake kernel needs the operator's schema.
    Defining the two schemas here (and keeping the Library object alive, or they are unregistered)
    lets torchvision and timm import and build every model; the detection ops themselves stay
    unavailable, which no zoo model uses. Only applied when the extension did not register them.
    """
    global _TORCHVISION_SHIM
    if _TORCHVISION_SHIM is not None or "torchvision" in sys.modules or _has_nms():
        return
    spec = importlib.util.find_spec("torchvision")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return  # not installed: the import that follows says so
    for path in Path(list(spec.submodule_search_locations)[0]).glob("_C.*"):
        try:
            torch.ops.load_library(str(path))  # what torchvision's own import tries first
        except OSError:
            pass
    if _has_nms():
        return
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _TORCHVISION_SHIM = lib


def _has_nms() -> bool:
    try:
        torch.ops.torchvision.nms  # noqa: B018 -- present once torchvision's C extension is loaded
    except (AttributeError, RuntimeError):
        return False
    return True


def parse_size(text: str) -> tuple[int, int, int]:
    """``BxHxW`` -> (B, H, W); a clear ValueError otherwise."""
    try:
        b, h, w = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"YTK_EXAMPLE_SIZE={text!r}: expected BxHxW, e.g. 1x64x96") from None
    if min(b, h, w) < 1:
        raise ValueError(f"YTK_EXAMPLE_SIZE={text!r}: every dimension must be at least 1")
    return b, h, w


def input_size(zoo: ZooEntry) -> tuple[int, int, int]:
    """The (B, H, W) this process uses for ``zoo``: ``YTK_EXAMPLE_SIZE`` if set, else the default size.

    A model with a fixed resolution keeps its own H x W (with the override's batch); a model that
    needs H and W to be multiples of its stride gets a clear error instead of a failing trace.
    """
    env = os.environ.get("YTK_EXAMPLE_SIZE")
    if not env:
        return zoo.default_size
    b, h, w = parse_size(env)
    if zoo.fixed_hw is not None and (h, w) != zoo.fixed_hw:
        fh, fw = zoo.fixed_hw
        print(f"zoo: {zoo.name} only takes {fh}x{fw} input; using {b}x{fh}x{fw} instead of YTK_EXAMPLE_SIZE={env}",
              file=sys.stderr)
        return b, fh, fw
    if h % zoo.multiple or w % zoo.multiple:
        raise ValueError(f"YTK_EXAMPLE_SIZE={env!r}: {zoo.name} needs H and W to be multiples of {zoo.multiple}")
    return b, h, w


def _randomise_norms(model: nn.Module) -> None:
    """Seeded non-trivial norm statistics and affines: with the library defaults (mean 0, var 1, weight 1,
    bias 0) a BatchNorm is a no-op, and numerics checks would pass a carve that dropped one."""
    gen = torch.Generator().manual_seed(WEIGHT_SEED + 1)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, nn.modules.batchnorm._BatchNorm) and mod.running_mean is not None:
                n = mod.num_features
                mod.running_mean.copy_(torch.randn(n, generator=gen) * 0.1)
                mod.running_var.copy_(torch.rand(n, generator=gen) * 0.5 + 0.75)
            if isinstance(mod, (nn.modules.batchnorm._BatchNorm, nn.LayerNorm, nn.GroupNorm)):
                if getattr(mod, "weight", None) is not None:
                    mod.weight.copy_(torch.rand(mod.weight.shape, generator=gen) * 0.5 + 0.75)
                if getattr(mod, "bias", None) is not None:
                    mod.bias.copy_(torch.randn(mod.bias.shape, generator=gen) * 0.1)


def _calibrate_batch_norms(model: nn.Module, zoo: ZooEntry, size: tuple[int, int, int]) -> None:
    """Give every BatchNorm the running statistics of the data it sees, as training leaves them: one pass
    over a seeded input (batch 2) with only the BatchNorms in training mode. For the entries that ask for it
    (``calibrate_norms``): with random weights and made-up statistics, MobileOne's activations grow block by
    block where its branches are summed (2e16 at the small size, far past fp16's 65504, so no fp16 engine
    could be checked against it); with the statistics of their input its BatchNorms normalise again, and
    the seeded affines keep none of them a no-op. Not applied to every model: where a BatchNorm sees a
    nearly constant channel (attention in LeViT, EfficientViT), the calibrated variance is tiny and any
    other input is blown up instead. A model built for its input size is calibrated at that size, any
    other at 128x192."""
    norms = [m for m in model.modules()
             if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
    if not norms:
        return
    h, w = (size[1], size[2]) if zoo.img_size or zoo.fixed_hw else (128, 192)
    x = torch.randn(2, 3, h, w, generator=torch.Generator().manual_seed(CALIBRATION_SEED))
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average: after one pass, exactly that pass's statistics
        m.train()
    with torch.no_grad():
        model(x)
    for m, momentum in zip(norms, momenta):
        m.momentum = momentum
    model.eval()


def set_fused_attn(model: nn.Module, enable: bool) -> int:
    """Point every timm attention module at F.scaled_dot_product_attention (True) or at its explicit
    ``q @ k.T -> softmax -> @ v`` path (False); returns how many modules were switched.

    timm decides at construction (``self.fused_attn = use_fused_attn()``, from the TIMM_FUSED_ATTN
    environment variable and ``timm.layers.set_fused_attn``); setting the attribute per model keeps
    the choice local to this model instead of flipping a process-wide switch.
    """
    switched = 0
    for mod in model.modules():
        if hasattr(mod, "fused_attn"):
            mod.fused_attn = enable
            switched += 1
    return switched


def build(zoo: ZooEntry, size: tuple[int, int, int]) -> nn.Module:
    """``zoo``'s network with random seeded weights (``pretrained=False``), in eval mode, for input ``size``."""
    ensure_torchvision_importable()
    kwargs = dict(zoo.kwargs)
    if zoo.img_size:
        kwargs["img_size"] = (size[1], size[2])
    torch.manual_seed(WEIGHT_SEED)
    if zoo.source == "timm":
        import timm

        model = timm.create_model(zoo.constructor, pretrained=False, **kwargs)
    else:
        import torchvision

        model = torchvision.models.get_model(zoo.constructor, weights=None, **kwargs)
    if zoo.fused_attn is not None and set_fused_attn(model, zoo.fused_attn) == 0:
        raise RuntimeError(f"{zoo.name}: no module of {zoo.constructor} has a fused_attn switch; fix its registry "
                           "entry's fused_attn")
    _randomise_norms(model)
    model.eval()
    if zoo.calibrate_norms:
        _calibrate_batch_norms(model, zoo, size)
    if zoo.deploy:
        from timm.utils.model import reparameterize_model

        model = reparameterize_model(model, inplace=True)
    return model


def zoo_model(name: str) -> tuple[Callable[[], nn.Module], Callable[[], tuple[torch.Tensor]]]:
    """``(Model, get_fwd_args)`` for the registry entry ``name``: what a zoo model file exports."""
    zoo = entry(name)

    def Model() -> nn.Module:  # noqa: N802 -- the name the loader looks for
        return build(zoo, input_size(zoo))

    def get_fwd_args() -> tuple[torch.Tensor]:
        b, h, w = input_size(zoo)
        return (torch.randn(b, 3, h, w, generator=torch.Generator().manual_seed(INPUT_SEED)),)

    Model.__doc__ = f"{zoo.name}: {zoo.source} {zoo.constructor}, random weights, eval mode."
    return Model, get_fwd_args

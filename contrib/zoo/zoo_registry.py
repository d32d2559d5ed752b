"""The model zoo's registry: every corpus entry, machine-readable, in one list (:data:`ZOO`).

Each entry names a timm or torchvision constructor, the family tags the corpus is balanced on
(depthwise-heavy or not; how it computes attention) and two sizes: the default (large) one, batch 4
at 1088x1920 wherever the model takes it, and the small one that CI and ``benchmarks/zoo.py`` use.
The model file of an entry is ``contrib/zoo/<name>.py``. No torch import here: tests and tools read
the registry without building anything.

Attention kinds: ``none``; ``sdpa`` (through ``F.scaled_dot_product_attention``); ``matmul-softmax``
(explicit ``q @ k.T``, softmax, ``@ v``); ``linear`` (no N x N softmax: ReLU linear attention, separable
self-attention).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

Source = Literal["timm", "torchvision"]
Attention = Literal["none", "sdpa", "matmul-softmax", "linear"]

ZOO_DIR = Path(__file__).resolve().parent
LARGE = (4, 1088, 1920)
SMALL = (1, 64, 96)
NATURAL = (4, 224, 224)


@dataclass(frozen=True)
class ZooEntry:
    """One corpus model. ``kwargs`` go to the constructor as they are; ``img_size`` passes the input's
    (H, W) too (timm models that size position embeddings or attention biases at construction);
    ``fused_attn`` sets every timm attention module's switch (None: timm's own default); ``fixed_hw``
    is the only resolution the model takes, when it has one."""

    name: str
    source: Source
    constructor: str
    family: str
    depthwise: bool
    attention: Attention
    default_size: tuple[int, int, int] = LARGE
    small_size: tuple[int, int, int] = SMALL
    img_size: bool = False
    fused_attn: bool | None = None
    fixed_hw: tuple[int, int] | None = None
    multiple: int = 32
    kwargs: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    deploy: bool = False  # built, then re-parameterised for inference (timm's reparameterize_model)
    calibrate_norms: bool = False  # BatchNorm statistics from a seeded pass (zoo_common._calibrate_batch_norms)

    @property
    def path(self) -> Path:
        """The entry's model file."""
        return ZOO_DIR / f"{self.name}.py"


def _timm(name: str, family: str, depthwise: bool, attention: Attention = "none", *, constructor: str = "",
          **options: Any) -> ZooEntry:
    return ZooEntry(name=name, source="timm", constructor=constructor or name, family=family, depthwise=depthwise,
                    attention=attention, **options)


def _tv(constructor: str, family: str, depthwise: bool, **options: Any) -> ZooEntry:
    return ZooEntry(name=f"tv_{constructor}", source="torchvision", constructor=constructor, family=family,
                    depthwise=depthwise, attention="none", **options)


_FIXED_224 = dict(default_size=NATURAL, small_size=(1, 224, 224), fixed_hw=(224, 224))

#: The corpus. Smallest variant of each family; both attention paths of one ViT (DeiT-Tiny).
ZOO: list[ZooEntry] = [
    # depthwise-separable CNNs
    _timm("mobilenetv2_050", "MobileNetV2", True),
    _timm("mobilenetv3_large_100", "MobileNetV3", True),
    _timm("mobilenetv3_small_050", "MobileNetV3", True),
    _timm("mobilenetv4_conv_small", "MobileNetV4", True),
    _timm("efficientnet_b0", "EfficientNet", True),
    _timm("tf_efficientnetv2_b0", "EfficientNetV2", True),
    _timm("mnasnet_050", "MnasNet", True),
    _timm("ghostnet_050", "GhostNet", True),
    _timm("lcnet_050", "PP-LCNet", True),
    _timm("mobileone_s0", "MobileOne", True, calibrate_norms=True,
          note="multi-branch as built (not re-parameterised); BatchNorm statistics from a seeded pass, or its "
               "random-weight activations pass fp16's range"),
    _timm("repvit_m0_9", "RepViT", True),
    _timm("fastvit_t8", "FastViT", True, note="RepMixer token mixing, no attention"),
    # grouped / dense CNNs
    _timm("regnetx_002", "RegNet", False, note="grouped 3x3 convs"),
    _timm("regnety_002", "RegNet", False, note="grouped 3x3 convs + squeeze-excite"),
    _timm("resnext26ts", "ResNeXt", False, note="grouped 3x3 convs (32 groups)"),
    # ConvNeXt-style: large depthwise kernels + LayerNorm + MLP
    _timm("convnext_atto", "ConvNeXt", True, note="depthwise 7x7"),
    _timm("convnextv2_atto", "ConvNeXtV2", True, note="depthwise 7x7, global response norm"),
    _timm("inception_next_atto", "InceptionNeXt", True, note="depthwise 3x3, 1x11 and 11x1 bands"),
    _timm("edgenext_xx_small", "EdgeNeXt", True, "matmul-softmax",
          note="transposed (cross-covariance) attention over channels"),
    _timm("poolformer_s12", "PoolFormer", False, note="average-pool token mixer"),
    # hybrids and transformers
    _timm("efficientvit_b0", "EfficientViT (MIT)", True, "linear", note="LiteMLA ReLU linear attention"),
    _timm("efficientvit_b1", "EfficientViT (MIT)", True, "linear",
          note="the spec's worked example as the published code writes it"),
    _timm("efficientvit_m0", "EfficientViT (MSRA)", True, "matmul-softmax", img_size=True,
          note="cascaded group attention in 7x7 windows"),
    _timm("mobilevit_xxs", "MobileViT", True, "sdpa", fused_attn=True),
    _timm("mobilevitv2_050", "MobileViTV2", True, "linear", note="separable self-attention"),
    _timm("fastvit_sa12", "FastViT", True, "sdpa", fused_attn=True, note="attention in the last stage"),
    _timm("efficientformer_l1", "EfficientFormer", False, "matmul-softmax", **_FIXED_224,  # type: ignore[arg-type]
          note="its attention biases are fixed at 7x7 tokens: 224x224 only"),
    _timm("efficientformerv2_s0", "EfficientFormerV2", True, "matmul-softmax", img_size=True),
    _timm("levit_128s", "LeViT", False, "matmul-softmax", img_size=True, default_size=NATURAL,
          note="builds at 1088x1920, but its attention-bias tables grow with the square of the token count "
               "(~1 GB at 8160 tokens): natural size kept"),
    _timm("tiny_vit_5m_224", "TinyViT", True, "sdpa", fused_attn=True, kwargs={"num_classes": 1000},
          note="windowed attention with a bias (attn_mask)"),
    _timm("deit_tiny_sdpa", "DeiT", False, "sdpa", constructor="deit_tiny_patch16_224", img_size=True,
          fused_attn=True, multiple=16),
    _timm("deit_tiny_matmul", "DeiT", False, "matmul-softmax", constructor="deit_tiny_patch16_224", img_size=True,
          fused_attn=False, multiple=16, note="timm's explicit attention path (fused_attn=False)"),
    _timm("swin_tiny", "Swin", False, "matmul-softmax", constructor="swin_tiny_patch4_window7_224", img_size=True,
          fused_attn=False, note="window attention; explicit path, timm's default (its fused path is experimental)"),
    # torchvision
    _tv("mobilenet_v2", "MobileNetV2", True),
    _tv("mobilenet_v3_small", "MobileNetV3", True),
    _tv("mnasnet0_5", "MnasNet", True),
    _tv("shufflenet_v2_x0_5", "ShuffleNetV2", True, note="channel shuffle"),
    _tv("regnet_y_400mf", "RegNet", False, note="grouped 3x3 convs + squeeze-excite"),
    _tv("resnext50_32x4d", "ResNeXt", False, note="grouped 3x3 convs (32 groups)"),
]

#: The inference form of the re-parameterisable models, as they are shipped: timm's ``reparameterize_model``
#: merges the training-time branches and folds every BatchNorm into its conv or Linear (same function,
#: fewer and different regions). The training forms above stay in the corpus: they test the carve on
#: multi-branch graphs, and a user may export a model without re-parameterising it.
DEPLOYED = ("mobileone_s0", "repvit_m0_9", "fastvit_t8", "efficientvit_m0", "levit_128s", "tiny_vit_5m_224")
ZOO += [replace(e, name=f"{e.name}_deploy", deploy=True,
                note=f"`{e.name}` re-parameterised for inference (timm reparameterize_model)")
        for e in ZOO if e.name in DEPLOYED]

#: The fast subset CI runs: a depthwise CNN, a ConvNeXt and a ViT (sdpa attention). Linear attention
#: (efficientvit_b0) would double its time; the e2e tests carve the worked example's LiteMLA already.
SUBSETS: dict[str, list[str]] = {
    "ci": ["mobilenetv2_050", "convnext_atto", "deit_tiny_sdpa"],
}

_BY_NAME = {e.name: e for e in ZOO}


def entry(name: str) -> ZooEntry:
    """The entry called ``name``; KeyError naming the valid names otherwise."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no zoo model {name!r}; known: {', '.join(sorted(_BY_NAME))}") from None


def names() -> list[str]:
    return [e.name for e in ZOO]

"""Human labels (the WHAT TO PLUG column) and derived plugin names (``DwConv3x3s1C256``).

A name encodes what a kernel may specialise on: op, kernel size, stride and, for a shape family,
the constant channel count; a dynamic remainder ends in ``Dyn``. Names are only defaults: the
spec's "the names are yours" -- users rename them in the emitted script.
"""

from __future__ import annotations

import re
from typing import Any


def _dims(v: list[Any] | None) -> str:
    return "x".join(str(x) for x in (v or [])) or "?"


def _stride(v: list[Any] | None) -> str:
    v = list(v or [1])
    return str(v[0]) if len(set(v)) == 1 else "x".join(str(x) for x in v)


def _dil(sig: dict[str, Any]) -> str:
    d = list(sig.get("dilation") or [1])
    return "" if all(x == 1 for x in d) else f"d{_stride(d)}"


def _multiplied(kind: str, sig: dict[str, Any]) -> bool:
    """A depthwise conv with a channel multiplier (FastViT's ``[2C, 1, k, k]``): more outputs than inputs."""
    return kind == "depthwise_conv" and sig.get("Cout") not in (None, sig.get("C"))


#: ONNX ops that spell one activation between them (the exporter's decompositions), and its name
_SPELLED = ((frozenset({"Div", "Erf", "Add", "Mul"}), "Gelu"), (frozenset({"HardSigmoid", "Mul"}), "HardSwish"),
            (frozenset({"Sigmoid", "Mul"}), "Silu"))
_WORDS = {"BatchNormalization": "Bn", "Clip": "Relu6"}  # any other op is its own word


def tag_words(ops: Any) -> list[str]:
    """The ONNX ops around a conv that tell two families apart, as words: ``Sigmoid`` + ``Mul`` is ``Silu``,
    ``Div Erf Add Mul`` is ``Gelu``, ``BatchNormalization`` (one the exporter left unfolded) ``Bn``."""
    left = set(ops or ())
    words = []
    for spelled, word in _SPELLED:
        if spelled <= left:
            left -= spelled
            words.append(word)
    return sorted(words + [_WORDS.get(op, op) for op in left])


def op_label(kind: str, cls: str, sig: dict[str, Any], tag: str = "") -> str:
    """The op part of a label, without channels: ``depthwise 3x3 s1``."""
    k, s = _dims(sig.get("k")), _stride(sig.get("stride"))
    dil = f" {_dil(sig)}" if _dil(sig) else ""
    dil += f" +{'+'.join(tag_words(sig.get('extra_ops')))}" if tag else ""
    pre = "transposed " if sig.get("transpose") else ""
    pre += {1: "1-D ", 3: "3-D "}.get(len(sig.get("k") or [0, 0]), "")  # a Conv1d's "conv 3 s1" read as a 3x3
    dil += {"Ln": " + LayerNorm", "LnNhwc": " + LayerNorm (NHWC out)"}.get(sig.get("norm") or "", "")
    dil += f", {sig['branches']} branches merged" if sig.get("branches") else ""  # a RepVGG-style block
    if kind == "depthwise_conv":
        return f"{pre}depthwise {k} s{s}{dil}"
    if kind == "grouped_conv":
        return f"{pre}grouped conv {k} s{s}{dil}"
    if kind == "conv":
        return f"{pre}conv {k} s{s}{dil}"
    if kind == "attention":
        return f"{cls} region" if sig.get("part") is None else f"{cls} region part {sig['part']}"
    if kind == "squeeze_excite":
        return "squeeze-excite"
    return "GEMM"


def channel_text(kind: str, sig: dict[str, Any]) -> str:
    if kind in ("conv", "grouped_conv"):
        g = f", g={sig['groups']}" if kind == "grouped_conv" else ""
        return f"C={sig.get('C')}->{sig.get('Cout')}{g}"
    if _multiplied(kind, sig):
        return f"C={sig.get('C')}->{sig.get('Cout')}"
    if kind == "gemm":
        return f"K={sig.get('K')}, N={sig.get('N')}"
    if kind == "squeeze_excite":
        return f"C={sig.get('C')}->{sig.get('CR')}"
    return f"C={sig.get('C')}"


def family_label(kind: str, cls: str, sig: dict[str, Any], tag: str = "") -> str:
    sep = " " if kind == "attention" else "  "
    return f"{op_label(kind, cls, sig, tag)}{sep}({channel_text(kind, sig)})"


def _range(vals: list[Any]) -> str:
    ints = sorted({v for v in vals if isinstance(v, int)})
    if ints and len(ints) == len({str(v) for v in vals}):
        return f"{ints[0]}..{ints[-1]}" if len(ints) > 1 else str(ints[0])
    return ",".join(sorted({str(v) for v in vals}))


def remainder_label(kind: str, cls: str, sigs: list[dict[str, Any]], tag: str = "") -> str:
    """``depthwise 3x3 s1  (C=16..1024, 4 families)  (dynamic remainder)``."""
    if kind in ("conv", "grouped_conv"):
        dims = f"C={_range([s.get('C') for s in sigs])}->{_range([s.get('Cout') for s in sigs])}"
    elif kind == "gemm":
        dims = f"K={_range([s.get('K') for s in sigs])}, N={_range([s.get('N') for s in sigs])}"
    else:
        dims = f"C={_range([s.get('C') for s in sigs])}"
    sep = " " if kind == "attention" else "  "
    return f"{op_label(kind, cls, sigs[0], tag)}{sep}({dims}, {len(sigs)} families)  (dynamic remainder)"


def _ident(text: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_]", "", text)
    return s if s and not s[0].isdigit() else f"P{s}"


def op_name(kind: str, cls: str, sig: dict[str, Any], tag: str = "") -> str:
    """The op part of a plugin name: ``DwConv3x3s1``, ``Conv1x1s1``, ``LiteMLA``."""
    k, s, d = _dims(sig.get("k")), _stride(sig.get("stride")), _dil(sig) + (sig.get("norm") or "") + tag
    conv = "Deconv" if sig.get("transpose") else "Conv"
    if kind == "depthwise_conv":
        return _ident(f"Dw{conv}{k}s{s}{d}")
    if kind == "grouped_conv":
        return _ident(f"G{conv}{k}s{s}{d}")
    if kind == "conv":
        return _ident(f"{conv}{k}s{s}{d}")
    if kind == "attention":
        return _ident(cls if sig.get("part") is None else f"{cls}P{sig['part']}")
    if kind == "squeeze_excite":
        return _ident(f"SE{tag}")
    return "Gemm"


def family_name(kind: str, cls: str, sig: dict[str, Any], tag: str = "") -> str:
    base = op_name(kind, cls, sig, tag)
    if kind in ("conv",):
        return _ident(f"{base}C{sig.get('C')}to{sig.get('Cout')}")
    if kind == "grouped_conv":
        return _ident(f"{base}G{sig.get('groups')}C{sig.get('C')}to{sig.get('Cout')}")
    if kind == "gemm":
        return _ident(f"{base}K{sig.get('K')}N{sig.get('N')}")
    if kind == "squeeze_excite":
        return _ident(f"{base}C{sig.get('C')}R{sig.get('CR')}")
    if _multiplied(kind, sig):
        return _ident(f"{base}C{sig.get('C')}to{sig.get('Cout')}")
    return _ident(f"{base}C{sig.get('C')}")


def remainder_name(kind: str, cls: str, sig: dict[str, Any], tag: str = "") -> str:
    return _ident(f"{op_name(kind, cls, sig, tag)}Dyn")


# What family_name / remainder_name append to the op part (channels, groups, K/N or Dyn), then what
# unique() may add (a shape suffix, a counter).
_TAIL = re.compile(r"(C\d+(to\d+)?|G\d+C\d+to\d+|K\d+N\d+|Dyn)([A-Z]\d+)*(_\d+)?$")


def op_of(name: str) -> str:
    """The op part of a derived plugin name, the inverse of ``family_name`` / ``remainder_name``:
    ``DwConv3x3s1C256``, ``DwConv3x3s1Dyn`` -> ``DwConv3x3s1``; ``GConv1x1s1G24C384to384`` ->
    ``GConv1x1s1``. A name without such a tail (one a user chose) is its own op."""
    return _TAIL.sub("", name) or name


def spatial_suffix(sig: dict[str, Any]) -> str:
    sp = sig.get("spatial") or []
    return "".join(f"{ax}{v}" for ax, v in zip("HWD" if len(sp) <= 3 else "ABCDEFG", sp))


def unique(names: list[str], suffixes: list[str]) -> list[str]:
    """Make names unique: first by a shape suffix (where the suffixes tell the names apart), then by a
    counter. Each name gets its suffix at most once: sites of one shape (per-site proposals of regions
    that bake their own weights) differ only by the counter."""
    out = list(names)
    for n in set(names):
        same = [j for j, m in enumerate(names) if m == n]
        if len(same) > 1 and len({suffixes[j] for j in same}) > 1:
            for j in same:
                out[j] = _ident(f"{n}{suffixes[j]}") if suffixes[j] else n
    seen: dict[str, int] = {}
    for i, n in enumerate(out):
        if n in seen:
            seen[n] += 1
            out[i] = f"{n}_{seen[n]}"
        else:
            seen[n] = 1
    return out


def unique_labels(labels: list[str], spatial: list[list[object]], paths: list[list[str]]) -> list[str]:
    """Tell apart rows of WHAT TO PLUG that would read the same: by their spatial size where it differs,
    else by their modules (a region that bakes its own weights is proposed once per site)."""
    out = list(labels)
    for label in set(labels):
        same = [j for j, x in enumerate(labels) if x == label]
        if len(same) < 2:
            continue
        by_shape = len({tuple(spatial[j]) for j in same}) == len(same) and all(spatial[j] for j in same)
        for j in same:
            where = "x".join(str(v) for v in spatial[j]) if by_shape else f"at {_path_pattern(paths[j])}"
            out[j] = f"{label}  {where}"
    return out


def _path_pattern(paths: list[str]) -> str:
    """One module path, or the paths with the parts that differ as ``*`` (``stages.3.blocks.*.mixer``)."""
    split = [p.split(".") for p in paths if p]
    if not split:
        return "<root>"
    if len({len(parts) for parts in split}) > 1:
        return f"{paths[0]}, ..."
    return ".".join(parts[0] if len(set(parts)) == 1 else "*" for parts in zip(*split))

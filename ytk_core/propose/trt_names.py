"""TensorRT layer names, taken apart into the ONNX-level names they were built from.

TensorRT names a fused layer after its parts, and the profile (``trtexec --exportProfile``) carries
only those names. The forms parsed here are the ones real engines print:

* ``A + B + C``                      vertical fusion (conv + bias + activation, conv + residual add)
* ``PWN(A, PWN(B, C))``              a generated pointwise kernel fusing A, B and C
* ``A || B``                         horizontal fusion (sibling convs / GEMMs sharing an input)
* ``{ForeignNode[first...last]}``    a Myelin span: every node from ``first`` to ``last`` in graph order
* ``Reformatting CopyNode for Input Tensor 0 to <layer>`` (``Output`` too) and the older
  ``<layer> input reformatter 0`` / ``<layer> output reformatter 0``: layout/precision copies
* ``(Unnamed Layer* 12) [Shuffle]``  helper layers the ONNX parser added without a name
* ``[HostToDeviceCopy 0]``, ``[trainStation1]``, ``__myl_...``: engine-internal work

Parsing is pure string work; resolving the names against the ONNX graph is ``layer_map``'s job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

LayerKind = Literal["compute", "reformat", "engine"]

_REFORMAT_NEW = re.compile(r"^Reformatting CopyNode for (Input|Output) Tensor (\d+) to (.+)$", re.S)
_REFORMAT_OLD = re.compile(r"^(.+) (input|output) reformatter (\d+)$", re.S)
_FOREIGN = re.compile(r"^\{ForeignNode\[(.*)\]\}$", re.S)
_UNNAMED = re.compile(r"^\(Unnamed Layer\* ?(\d+)\) \[([^\]]+)\]")
_ENGINE_INTERNAL = re.compile(r"^(\[(HostToDeviceCopy|DeviceToHostCopy|trainStation)[^\]]*\]|__my[a-z]*\d*_[\w]*|"
                              r"\[?(shapeHostToDevice|ShapeHostToDevice)[^\]]*\]?)$")
_METADATA = re.compile(r"\[ONNX Layer: ([^\]|\x1e\x1f]+?)\s*(?:\|[^\]]*)?\]")


@dataclass
class ParsedName:
    """One layer name taken apart.

    ``atoms`` are the names of the fused parts (ONNX node names, tensor names or helper-layer
    names, still to be resolved); ``spans`` are ForeignNode ``(first, last)`` pairs. For a reformat
    layer, ``target`` is the parsed name of the layer it feeds (or is fed by).
    """

    raw: str
    kind: LayerKind
    atoms: list[str] = field(default_factory=list)
    spans: list[tuple[str, str]] = field(default_factory=list)
    target: "ParsedName | None" = None
    direction: Literal["input", "output", ""] = ""

    @property
    def all_atoms(self) -> list[str]:
        """Atoms, span ends included (what a resolver may look up)."""
        out = list(self.atoms)
        for a, b in self.spans:
            out += [a, b]
        return out


def is_unnamed(atom: str) -> bool:
    """``(Unnamed Layer* 12) [Shuffle]`` and names derived from it (``..._output``)."""
    return bool(_UNNAMED.match(atom))


def unnamed_type(atom: str) -> str | None:
    m = _UNNAMED.match(atom)
    return m.group(2) if m else None


def metadata_nodes(metadata: str | None) -> list[str]:
    """ONNX node names in a TensorRT 10 layer ``Metadata`` field.

    TensorRT writes ``[ONNX Layer: <node> | <function stack>...]`` once per ONNX node the layer
    came from, separated by ``\\x1f`` (some builds ``\\x1e``).
    """
    if not metadata:
        return []
    seen: list[str] = []
    for m in _METADATA.finditer(metadata):
        name = m.group(1).strip()
        if name and name not in seen:
            seen.append(name)
    return seen


def split_top(text: str, sep: str) -> list[str]:
    """Split ``text`` on ``sep`` where no bracket is open (names contain ``(...)`` and ``[...]``)."""
    parts: list[str] = []
    depth = 0
    start = 0
    i = 0
    n, k = len(text), len(sep)
    while i < n:
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(0, depth - 1)
        elif depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i])
            i += k
            start = i
            continue
        i += 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _balanced(text: str) -> bool:
    depth = 0
    for c in text:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


def _split_span(inner: str) -> tuple[str, str]:
    """``first...last``; a name may itself hold dots, so take the ``...`` that leaves both sides balanced."""
    idx = [m.start() for m in re.finditer(r"\.\.\.", inner)]
    for i in idx:
        a, b = inner[:i], inner[i + 3:]
        if a and b and _balanced(a) and _balanced(b):
            return a.strip(), b.strip()
    return inner.strip(), inner.strip()


def _parts(text: str, out: ParsedName) -> None:
    for group in split_top(text, "||"):
        for part in split_top(group, " + "):
            m = _FOREIGN.match(part)
            if m:
                out.spans.append(_split_span(m.group(1)))
            elif part.startswith("PWN(") and part.endswith(")") and _balanced(part[4:-1]):
                for arg in split_top(part[4:-1], ","):
                    _parts(arg, out)
            else:
                out.atoms.append(part)


def parse_layer_name(name: str) -> ParsedName:
    """Take a TensorRT layer name apart (see the module docstring for the forms)."""
    raw = name
    text = name.strip()
    m = _REFORMAT_NEW.match(text)
    if m:
        return ParsedName(raw=raw, kind="reformat", target=parse_layer_name(m.group(3)),
                          direction="input" if m.group(1) == "Input" else "output")
    m = _REFORMAT_OLD.match(text)
    if m:
        return ParsedName(raw=raw, kind="reformat", target=parse_layer_name(m.group(1)), direction=m.group(2))
    if _ENGINE_INTERNAL.match(text):
        return ParsedName(raw=raw, kind="engine")
    out = ParsedName(raw=raw, kind="compute")
    _parts(text, out)
    return out


# -- decorations TensorRT adds to ONNX names ----------------------------------------------------
#: Suffixes after which the rest is an ONNX node or tensor name.
SUFFIXES = (
    re.compile(r"\s+copy$"),              # concat input copies: "<tensor> copy"
    re.compile(r"_copy\d*$"),
    re.compile(r"_myl\d+_\d+$"),          # TensorRT 10 Myelin kernels named after a node
    re.compile(r"_pooling$"),
    re.compile(r"_output(?:_\d+)?$"),     # tensor names: "/x/Conv_output_0" -> node "/x/Conv"
    re.compile(r"\s*\[[A-Za-z ]+\]$"),    # "name [Shuffle]"
)
#: Prefixes of helper layers the ONNX parser names after the node they serve.
PREFIXES = (
    re.compile(r"^(?:reshape|squeeze|unsqueeze|shuffle|transpose|expand|cast|slice)_(?:node_)?(?:before|after|"
               r"between)_"),
    re.compile(r"^(?:copy|cast)(?:Input|Output)?_"),
)


def undecorate(atom: str) -> list[str]:
    """Names to try for ``atom``, most specific first: itself, then with TensorRT's decorations removed."""
    seen = [atom]
    frontier = [atom]
    while frontier:
        cur = frontier.pop()
        for rx in (*SUFFIXES, *PREFIXES):
            nxt = rx.sub("", cur).strip()
            if nxt and nxt != cur and nxt not in seen:
                seen.append(nxt)
                frontier.append(nxt)
    return seen

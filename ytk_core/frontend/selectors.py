"""The ``--plugin`` selector grammar (the spec's "Selector grammar" section).

::

    selector  := [namespace "::"] PluginName "=" region modifier*
    region    := OpsName [":around"]          a torch class; every instance is a site
               | "call:" dotted.path           every call of an op (e.g. call:torch.matmul)
               | node "..." node               a dataflow span between two fx_nodes.json nodes
               | node ("," node)*              an explicit node list (one site); a single node is
                                              a word that names no module class (conv2d_3)
               | "mod:" suffix                 modules whose qualified name ends with suffix
    modifier  := "@where=" glob ("," glob)*    module-path globs, OR-ed; "!glob" excludes (one @where
                                              per selector: a second is refused, not OR-ed silently)
               | "@lift=" (fold_conv_bn | fold_conv_bn_seq | none)
               | "@nojoin"
               | "@epilogue"                  also take the pointwise ops after the region (BN,
                                              activation, ...) up to a residual add or a fork
               | "@part=" digits              only with :around: the region's K-th convex part
                                              (0-based, in graph order) that holds an attention op,
                                              for a block whose region an outside op (a conv)
                                              cuts through (docs/regions.md)
               | "@branches"                  only the module's parallel branches over one input and
                                              their sum (a MobileOne block that also holds an SE),
                                              merged into one conv (docs/regions.md)

Each modifier appears at most once. A namespace is optional (``yasp`` by default); ``::X`` is the empty
namespace. A malformed selector is a :class:`SelectorError` that quotes it, points at the column and says
what was expected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from ..errors import UsageError

DEFAULT_NAMESPACE = "yasp"
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: what a plugin namespace may hold (also checked where a namespace is given on its own: propose --namespace)
NAMESPACE_RE = re.compile(r"[A-Za-z0-9_]*")
_NS = NAMESPACE_RE
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_0-9][A-Za-z0-9_]*)*")
_NODE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_MODPATH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.]*")
#: a module-path glob: anything but what ends it ('@' a modifier, ',' the next glob) or whitespace, so a
#: ModuleDict key such as "a;b" or "c\"d" can be named; a leading '!' excludes
_GLOB = re.compile(r"!?[^@,\s]+")
LIFT_MODES = ("fold_conv_bn", "fold_conv_bn_seq", "none")

RegionKind = Literal["class", "call", "span", "nodes", "mod"]


class SelectorError(UsageError):
    def __init__(self, text: str, col: int, expected: str) -> None:
        caret = " " * (col + 4) + "^"
        super().__init__(f"malformed --plugin selector at column {col + 1}: expected {expected}\n"
                         f"    {text}\n{caret}",
                         hint="form: <namespace>::<PluginName>=<OpsName>[:around][@where=<globs>][@lift=<how>][@nojoin]"
                              "[@epilogue][@part=<K>][@branches]")
        self.column = col
        self.expected = expected
        self.selector = str(text)  # as data: a caller carving several (the autoloop) drops just this one


@dataclass(frozen=True)
class Selector:
    text: str
    namespace: str
    name: str
    kind: RegionKind
    ops_name: str = ""
    around: bool = False
    where: tuple[str, ...] = ()
    lift: str | None = None
    nojoin: bool = False
    epilogue: bool = False
    part: int | None = None
    branches: bool = False
    call_target: str = ""
    span: tuple[str, str] = ("", "")
    nodes: tuple[str, ...] = ()
    mod_suffix: str = ""
    modifiers_seen: tuple[str, ...] = field(default=(), compare=False)

    @property
    def includes(self) -> tuple[str, ...]:
        return tuple(g for g in self.where if not g.startswith("!"))

    @property
    def excludes(self) -> tuple[str, ...]:
        return tuple(g[1:] for g in self.where if g.startswith("!"))

    def region_text(self) -> str:
        """The part right of ``=``, as a readable label."""
        return self.text.split("=", 1)[1] if "=" in self.text else self.text


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, expected: str, col: int | None = None) -> SelectorError:
        return SelectorError(self.text, self.pos if col is None else col, expected)

    def eat(self, lit: str) -> bool:
        if self.text.startswith(lit, self.pos):
            self.pos += len(lit)
            return True
        return False

    def match(self, rx: re.Pattern[str], expected: str) -> str:
        m = rx.match(self.text, self.pos)
        if not m or not m.group(0):
            raise self.fail(expected)
        self.pos = m.end()
        return m.group(0)

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""


def parse_selector(text: str) -> Selector:
    """Parse one selector; raises :class:`SelectorError` (never anything else) on bad input."""
    if not isinstance(text, str):
        raise SelectorError(str(text), 0, "a selector string")
    s = _Scanner(text)
    if not text.strip():
        raise s.fail("<namespace>::<PluginName>=<region>")
    if text != text.strip():
        raise s.fail("no leading or trailing whitespace", 0 if text[0].isspace() else len(text.rstrip()))
    head_end = text.find("=")
    ns = DEFAULT_NAMESPACE
    if "::" in text[: head_end if head_end >= 0 else len(text)]:
        ns = s.match(_NS, "a namespace") if s.peek() != ":" else ""
        if not s.eat("::"):
            raise s.fail("'::' after the namespace")
    name = s.match(_IDENT, "a plugin name (letters, digits, _; not starting with a digit)")
    if not s.eat("="):
        raise s.fail("'=' after the plugin name")
    fields: dict = {"namespace": ns, "name": name}
    _parse_region(s, fields)
    seen: list[str] = []
    while not s.at_end():
        col = s.pos
        if not s.eat("@"):
            raise s.fail("'@' to start a modifier (@where=, @lift=, @nojoin, @epilogue, @part=, @branches) or the "
                         "end of the selector")
        if s.eat("where="):
            globs = [s.match(_GLOB, "a module-path glob")]
            while s.eat(","):
                globs.append(s.match(_GLOB, "a module-path glob after ','"))
            key, fields["where"] = "where", tuple(globs)
        elif s.eat("lift="):
            how = s.match(re.compile(r"[a-z_]+"), f"a lift mode ({', '.join(LIFT_MODES)})")
            if how not in LIFT_MODES:
                raise s.fail(f"a lift mode ({', '.join(LIFT_MODES)}), not {how!r}", s.pos - len(how))
            key, fields["lift"] = "lift", how
        elif s.eat("nojoin"):
            key, fields["nojoin"] = "nojoin", True
        elif s.eat("epilogue"):
            key, fields["epilogue"] = "epilogue", True
        elif s.eat("part="):
            key, fields["part"] = "part", int(s.match(re.compile(r"[0-9]+"), "a part number (0, 1, ...)"))
        elif s.eat("branches"):
            key, fields["branches"] = "branches", True
        else:
            raise s.fail("a modifier: @where=<globs>, @lift=<how>, @nojoin, @epilogue, @part=<K> or @branches", col + 1)
        if key == "where" and key in seen:
            # two @where= could mean "either" or "both"; one list of globs says it (OR-ed, ! excludes)
            raise s.fail("@where only once: put every glob in one @where=, comma-separated (they are OR-ed; "
                         "a !glob excludes)", col)
        if key in seen:
            raise s.fail(f"@{key} only once", col)
        seen.append(key)
    if fields.get("nojoin") and not fields.get("around"):
        raise SelectorError(text, text.find("@nojoin"), "@nojoin only together with :around (it stops an :around "
                            "region from swallowing its joining concat)")
    if "part" in fields and not fields.get("around"):
        raise SelectorError(text, text.find("@part"), "@part only together with :around (it names one convex part of "
                            "an :around region)")
    if fields.get("branches") and (fields.get("around") or fields["kind"] not in ("class", "mod")):
        raise SelectorError(text, text.find("@branches"), "@branches only with a module region (OpsName or mod:, not "
                            ":around): it takes the branch sum inside each matched module")
    if fields.get("where") and fields["kind"] not in ("class", "call"):
        raise SelectorError(text, text.find("@where"), "@where only with a class (OpsName) or call: region")
    return Selector(text=text, modifiers_seen=tuple(seen), **fields)


def _parse_region(s: _Scanner, f: dict) -> None:
    if s.at_end():
        raise s.fail("a region: <OpsName>, call:<dotted.path>, A...B, a,b,c or mod:<suffix>")
    if s.eat("call:"):
        f["kind"], f["call_target"] = "call", s.match(_DOTTED, "a dotted op path, e.g. torch.matmul")
        return
    if s.eat("mod:"):
        f["kind"], f["mod_suffix"] = "mod", s.match(_MODPATH, "a module qualified-name suffix")
        return
    start = s.pos
    first = s.match(_NODE, "a torch class name or an fx node name")
    if "..." in first or first.endswith("."):
        # "A...B": node names may hold dots, so the span marker was swallowed; split it back off.
        first = first.split("...", 1)[0].rstrip(".") if "..." in first else first.rstrip(".")
        if not first:
            raise s.fail("an fx node name before '...'", start)
        s.pos = start + len(first)
    if s.eat("..."):
        second = s.match(_NODE, "the fx node that ends the span")
        f["kind"], f["span"] = "span", (first, second)
        return
    if s.peek() == ",":
        nodes = [first]
        while s.eat(","):
            nodes.append(s.match(_NODE, "an fx node name after ','"))
        f["kind"], f["nodes"] = "nodes", tuple(nodes)
        return
    if "." in first:
        raise s.fail("a torch class name (no dots); use mod:<suffix> for a module path", start)
    f["kind"], f["ops_name"] = "class", first
    if s.eat(":around"):
        f["around"] = True
    elif s.peek() == ":":
        raise s.fail("':around' (the only region suffix)")

"""Docs as tests: every command in docs/byom.md runs, and what the doc shows is what it prints.

The page is parsed into fenced blocks. Every ```bash block runs, in order, through a real bash
(``set -eo pipefail``) in a scratch directory laid out like the repository root (``.venv`` and
``tests`` linked in), so the doc's ``export``/``cd`` carry from one block to the next as they do in
a reader's shell. A block must exit 0, or the status an ``<!-- expect-exit: N -->`` comment right
before it names. Every ```text block is output the preceding bash block printed: each of its
non-empty lines must appear in that block's stdout + stderr (runs of blanks compared as one, so a
column width may change); a line ``...`` marks lines left out, and a line ending in `` ...`` is
checked up to there. A ```python block after ``<!-- file: PATH -->`` is the file PATH, verbatim;
a block with no language (a grammar) is shown only, and must hold no command.

The README's quick start holds only ``make`` targets (a full install and the full-size example), so
it is not run here. The commands use the mock backends (set by the doc) at the model's small size:
the whole page takes well under a minute of CPU.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import REPO

DOC = REPO / "docs" / "byom.md"
_FENCE = re.compile(r"^```(\S*)\s*$")
_NOTE = re.compile(r"^<!--\s*(expect-exit|file):\s*(\S+)\s*-->\s*$")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
#: Variables a reader's shell may hold that would change what the doc's commands do.
_SCRUB = ("YTK_ENGINE", "YTK_KERNELGEN", "YTK_BUILDER", "YTK_CONFIG", "YTK_EXAMPLE_SIZE", "YTK_KERNEL_CACHE",
          "YTK_MOCK_SEED", "YTK_DISABLE_PLUGIN_AUTOLOAD", "YTK_TRACEBACK", "YTK_SKIP_EXPORT_CHECK")


@dataclass
class Block:
    lang: str
    text: str
    line: int  # 1-based line of the opening fence
    notes: dict[str, str] = field(default_factory=dict)


def blocks(path: Path = DOC) -> list[Block]:
    out: list[Block] = []
    lines = path.read_text().splitlines()
    notes: dict[str, str] = {}
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m:
            start, body = i, []
            i += 1
            while i < len(lines) and lines[i].rstrip() != "```":
                body.append(lines[i])
                i += 1
            assert i < len(lines), f"{path.name}:{start + 1}: unclosed ``` block"
            out.append(Block(m.group(1), "\n".join(body) + "\n", start + 1, notes))
            notes = {}
        else:
            n = _NOTE.match(lines[i].strip())
            if n:
                notes = {**notes, n.group(1): n.group(2)}
            elif lines[i].strip():
                notes = {}  # a note applies to the block right after it only
        i += 1
    return out


def _norm(text: str) -> str:
    return "\n".join(" ".join(line.split()) for line in _ANSI.sub("", text).splitlines())


def missing_lines(shown: str, printed: str) -> list[str]:
    """The lines of an output excerpt that the command did not print."""
    got = _norm(printed)
    missing = []
    for raw in shown.splitlines():
        line = " ".join(raw.split())
        if not line or line == "...":
            continue
        if line.endswith(" ...") or line.endswith("..."):
            line = line[:-3].rstrip()
        if line not in got:
            missing.append(raw)
    return missing


def test_doc_parses_into_commands_and_outputs() -> None:
    bs = blocks()
    bash = [b for b in bs if b.lang == "bash"]
    assert len(bash) >= 8, "docs/byom.md lost its commands"
    assert bs[0].lang != "text", "an output block before any command"
    for b in bs:
        assert b.lang in ("bash", "text", "python", ""), f"byom.md:{b.line}: block kind {b.lang!r} is not checked"
        if b.lang in ("", "python"):  # shown, not run: it must not be a command a reader would type
            assert not re.search(r"^\s*(\$ )?(ytk|make|python|bash|\./)\b", b.text, re.M) or "file" in b.notes, (
                f"byom.md:{b.line}: a command in a block that is not ```bash is never run")
        if "expect-exit" in b.notes:
            assert b.lang == "bash", f"byom.md:{b.line}: expect-exit on a {b.lang} block"
            assert b.notes["expect-exit"].isdigit()


def test_output_excerpts_are_checked_line_by_line() -> None:
    printed = "latency  median 0.202 ms  (SIMULATED)\nrebuild: ytk embedded compile -a X --onnx /tmp/a.onnx\n"
    assert missing_lines("latency median 0.202 ms (SIMULATED)\n...\nrebuild: ytk embedded compile ...", printed) == []
    assert missing_lines("latency  median 0.203 ms  (SIMULATED)", printed) == ["latency  median 0.203 ms  (SIMULATED)"]
    assert missing_lines("rebuild: ytk embedded verify ...", printed) == ["rebuild: ytk embedded verify ..."]


def test_model_listing_is_the_file_the_commands_run() -> None:
    files = [b for b in blocks() if "file" in b.notes]
    assert files, "docs/byom.md shows no model.py listing"
    for b in files:
        path = REPO / b.notes["file"]
        assert path.is_file(), f"byom.md:{b.line}: {path} does not exist"
        assert b.text == path.read_text(), f"byom.md:{b.line}: the listing differs from {b.notes['file']}"


def test_selector_examples_cover_the_grammar() -> None:
    """The grammar table has a parseable example of every form selectors.py knows."""
    from ytk_core.frontend import selectors

    text = DOC.read_text()
    section = text.split("<!-- selector-examples -->", 1)[1].split("\n\n", 1)[0]
    rows = [row.split("|") for row in section.splitlines() if row.startswith("|")]
    examples = [m for cells in rows for m in re.findall(r"`([^`]+)`", cells[2])]
    assert len(examples) >= 10, "the selector table lost its examples"
    parsed = [selectors.parse_selector(e) for e in examples]
    kinds = {p.kind for p in parsed}
    assert kinds >= {"class", "call", "span", "nodes", "mod"}, kinds
    modifiers = set(re.findall(r'"@(\w+)', selectors.__doc__ or ""))
    assert modifiers, "selectors.py's grammar lists no modifier"
    seen = {m for p in parsed for m in p.modifiers_seen}
    assert modifiers <= seen, f"no example of @{', @'.join(sorted(modifiers - seen))} in docs/byom.md"
    assert any(p.around for p in parsed)
    assert any(p.excludes for p in parsed), "no example of a '!' exclusion"
    namespaces = {p.namespace for p in parsed}
    assert {"yasp", ""} <= namespaces and len(namespaces) >= 3, namespaces
    assert any("::" not in e for e in examples), "no example of the default namespace"


class Shell:
    """One reader's shell: each block runs in a fresh bash that starts where the last one ended
    (its exported variables and its working directory), as typing them in one terminal would."""

    def __init__(self, tmp: Path) -> None:
        self.root = tmp / "repo"  # laid out like the repository root for the paths the doc uses
        self.root.mkdir()
        (self.root / ".venv").symlink_to(sys.prefix)  # the environment running the tests, wherever it lives
        (self.root / "tests").symlink_to(REPO / "tests")
        self.state = tmp / "shell.state"
        self.env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
        self.env["YTK_CACHE_DIR"] = str(tmp / "cache")  # the doc clears the cache: never the reader's

    def run(self, text: str, timeout: float = 300) -> tuple[int, str]:
        st = shlex.quote(str(self.state))
        script = (f"set -eo pipefail\n[ -f {st} ] && . {st}\n"
                  f"trap '__rc=$?; {{ export -p; printf \"cd %q\\n\" \"$PWD\"; }} > {st}; exit $__rc' EXIT\n{text}")
        p = subprocess.run(["bash", "-c", script], cwd=self.root, env=self.env, capture_output=True, text=True,
                           timeout=timeout)
        return p.returncode, p.stdout + p.stderr


@pytest.mark.slow
def test_every_command_runs_as_documented(tmp_path: Path) -> None:
    sh = Shell(tmp_path)
    last: tuple[Block, str] | None = None
    ran = 0
    for b in blocks():
        if b.lang == "text":
            assert last is not None, f"byom.md:{b.line}: output shown before any command"
            cmd, printed = last
            gone = missing_lines(b.text, printed)
            assert not gone, (f"byom.md:{b.line}: the output shown for the command at line {cmd.line} was not "
                              "printed:\n  " + "\n  ".join(gone) + f"\n--- what it printed ---\n{printed[-6000:]}")
            continue
        if b.lang != "bash":
            continue
        rc, printed = sh.run(b.text)
        want = int(b.notes.get("expect-exit", "0"))
        assert rc == want, (f"byom.md:{b.line}: exit {rc}, the doc expects {want}:\n{b.text}"
                            f"--- output ---\n{printed[-6000:]}")
        last = (b, printed)
        ran += 1
    assert ran >= 8

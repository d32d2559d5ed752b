"""Every environment variable ytk reads is in the README's table: YTK_TRTEXEC was read by the tensorrt
engine and named in its own messages, but a user reading the README's list never learned of it."""

from __future__ import annotations

import ast
import re

from tests.conftest import REPO

#: YTK_ names in the Python sources that are not environment variables ytk reads
NOT_ENV = {
    "YTK_AUTOLOOP_CRASH_AT": "test-only: SIGKILLs the autoloop at a named point (ytk_core/autoloop/control.py)",
    "YTK_DW_PINNED": "a CUDA macro of the depthwise templates", "YTK_DW_STAGE": "a CUDA macro",
    "YTK_PW_MMA": "a CUDA macro of the 1x1 templates", "YTK_PW_ROLL4": "a CUDA macro",
    "YTK_RING_TRACE_START": "a CUDA macro of the developer trace build", "YTK_RING_TRACE_ITEM": "a CUDA macro",
    "YTK_RING_TRACE_END": "a CUDA macro",
}


def _names() -> dict[str, str]:
    found: dict[str, str] = {}
    roots = [REPO / "ytk_core", REPO / "hookspecs" / "ytk_hookspecs", REPO / "backends"]
    for root in roots:
        for f in sorted(root.rglob("*.py")):
            if "tests" in f.relative_to(REPO).parts:
                continue
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(
                        r"YTK_[A-Z0-9_]+", node.value):
                    found.setdefault(node.value, str(f.relative_to(REPO)))
    return found


def test_every_environment_variable_ytk_reads_is_in_the_readme_table():
    readme = (REPO / "README.md").read_text()
    table = readme[readme.index("## Environment variables and caches"):]
    table = table[:table.index("\n## ", 1)]
    names = _names()
    assert "YTK_TRTEXEC" in names and "YTK_ENGINE" in names, "the scan finds what the code reads"
    missing = {n: where for n, where in names.items() if n not in NOT_ENV and f"`{n}" not in table}
    assert not missing, f"read by the code but not in the README's table: {missing}"
    stale = set(NOT_ENV) - set(names)
    assert not stale, f"no longer in the sources: {sorted(stale)}"

"""docs/gaia.md as a test: every ```bash block runs in order in one reader's shell (the page starts a
service on port 8471 with the mock generator, asks it things, and stops it); every ```text block is
output the block before it printed. ```sh blocks are shown only (the GPU run for the next session)."""

from __future__ import annotations

import socket

import pytest

from tests.conftest import REPO
from tests.docs.test_docs_commands import Shell, blocks, missing_lines

DOC = REPO / "docs" / "gaia.md"


def test_the_page_parses() -> None:
    bs = blocks(DOC)
    assert sum(b.lang == "bash" for b in bs) >= 4
    assert {b.lang for b in bs} <= {"bash", "text", "toml", "sh"}


@pytest.mark.slow
def test_every_command_runs_as_documented(tmp_path) -> None:
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", 8471)) == 0:
            pytest.skip("port 8471, which the page uses, is taken on this machine")
    sh = Shell(tmp_path)
    for k in ("YTK_GAIA_URL", "YTK_GAIA_API_KEY", "YTK_GAIA_RETRY_S", "YTK_KERNELGEN", "YTK_BUILDER"):
        sh.env.pop(k, None)
    last = None
    try:
        for b in blocks(DOC):
            if b.lang == "text":
                assert last is not None, f"gaia.md:{b.line}: output before any command"
                gone = missing_lines(b.text, last[1])
                assert not gone, f"gaia.md:{b.line}: not printed:\n  " + "\n  ".join(gone) + f"\n---\n{last[1][-4000:]}"
                continue
            if b.lang != "bash":
                continue
            rc, printed = sh.run(b.text, timeout=120)
            want = int(b.notes.get("expect-exit", "0"))
            assert rc == want, f"gaia.md:{b.line}: exit {rc}, expected {want}:\n{b.text}---\n{printed[-4000:]}"
            last = (b, printed)
    finally:
        sh.run("[ -f gaia.pid ] && kill $(cat gaia.pid) 2>/dev/null; true")

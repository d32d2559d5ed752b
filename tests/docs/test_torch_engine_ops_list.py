"""docs/guide.md lists the ONNX ops the torch engine runs, and the engine's own error points there: the list
must be the engine's registry (less its internal fused ops), no more and no less."""

from __future__ import annotations

import re

from tests.conftest import REPO


def test_the_guide_lists_exactly_the_ops_the_torch_engine_runs():
    from ytk_backend_torch.ops import OPS

    doc = (REPO / "docs" / "guide.md").read_text()
    block = re.search(r"<!-- torch-engine-ops:[^>]*-->(.*?)<!-- /torch-engine-ops -->", doc, re.S)
    assert block, "docs/guide.md lost its torch-engine-ops block"
    listed = {w.strip().rstrip(".") for w in block.group(1).replace("\n", " ").split(",")}
    runs = {name for name in OPS if not name.startswith("Ytk")}  # Ytk*: the engine's own fusions, not ONNX ops
    assert listed == runs, f"missing from the guide: {sorted(runs - listed)}; not run: {sorted(listed - runs)}"

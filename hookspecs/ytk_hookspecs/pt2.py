"""Reading a region's ``.pt2`` safely from several threads.

``torch.export.load`` keeps its deserializer in a process-wide global, so two threads loading at
once fail with "_CURRENT_DESERIALIZER is already set" (the autoloop runs kernel generation jobs
concurrently in one process). Every backend reads ``.pt2`` files through :func:`load_exported`,
which serialises the loads; torch is imported only when called.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

__all__ = ["load_exported"]


_LOCK = threading.Lock()


def load_exported(path: str | Path) -> Any:
    """``torch.export.load(path)``, one load at a time in this process."""
    import torch

    with _LOCK:
        return torch.export.load(str(path))

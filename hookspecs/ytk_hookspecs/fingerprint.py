"""A fingerprint of a backend's installed code, shared by every cache keyed on a generator's output: the
client's kernel cache (``ytk_core.stages.kernel_cache``) and the Gaia service's result cache."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

__all__ = ["code_fingerprint"]


_FINGERPRINTS: dict[str, str] = {}
_FP_LOCK = threading.Lock()


def code_fingerprint(backend: object) -> str:
    """A digest of the installed code of the package that defines ``backend``'s class: every file under
    its top-level package (sources, ``.cuh`` templates, data), by path and content, skipping bytecode.
    Editing a generator -- even without bumping its version -- gives its jobs new keys. Computed once per
    package and process."""
    module = type(backend).__module__
    top = module.split(".")[0]
    with _FP_LOCK:
        if top in _FINGERPRINTS:
            return _FINGERPRINTS[top]
        import importlib

        h = hashlib.sha256(top.encode())
        pkg = importlib.import_module(top)
        if hasattr(pkg, "__path__"):  # a package: everything under it
            found = [(root, p) for root in map(Path, pkg.__path__) for p in root.rglob("*")
                     if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")]
        else:  # a single-module backend: that file only (not its site-packages neighbours)
            f = Path(pkg.__file__ or "")
            found = [(f.parent, f)] if f.is_file() else []
        for root, f in sorted(found):
            h.update(str(f.relative_to(root)).encode() + b"\0")
            try:
                h.update(f.read_bytes())
            except OSError:
                h.update(b"<unreadable>")
        _FINGERPRINTS[top] = h.hexdigest()[:24]
        return _FINGERPRINTS[top]

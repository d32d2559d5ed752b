"""PTX identity of the templates backend's kernels across a refactor (a developer tool, CPU + nvcc).

    python benchmarks/templates_ptx_identity.py record FILE [--jobs N]    # before the change
    python benchmarks/templates_ptx_identity.py compare FILE [--jobs N]   # after: prints a table

A sample of every family's variant space (every 7th point plus the first and the last, and one of
each kind the sample would otherwise miss: every depthwise stage, ring depth, strip weight mode,
TMA output store, tensor-core weight split, 7x7's pinned loads; 1x1 SIMT and tensor cores, dense,
grouped and dynamic; LiteMLA joined and pre-joined) is emitted exactly as a scoring build emits it
(``region_variants``), each variant compiled alone (the prelude and its namespace) with
``nvcc -ptx -O3 -arch=sm_XX``; the ring variants for sm_90, the others for sm_90 and some also for
sm_87. ``record`` stores each PTX's SHA-256; ``compare`` recomputes them and reports per variant
whether the PTX is byte-identical.

The only normalisation: the variant's C++ namespace (before: its list position, ``ytk_v007``;
after: its name) is replaced by ``NS`` wherever it occurs in the PTX, both bare and in its Itanium
mangled form ``<length><name>`` (so ``_ZN8ytk_v0006launch...`` and ``_ZN23ytk_pipe_v8_..6launch...``
both read ``_ZNNS6launch...``). Nothing else is rewritten.

This is not a test: golden hashes rot with every intended kernel change. Record right before a
refactor, compare right after.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / p) for p in ("hookspecs", ".", "backends/nvcc", "backends/templates")]

from ytk_backend_nvcc.toolchain import find_nvcc  # noqa: E402
from ytk_backend_templates.emit_common import PRELUDE  # noqa: E402
from ytk_backend_templates.regions import Conv1x1Region, DwConvRegion, LiteMLARegion  # noqa: E402
from ytk_backend_templates.variants import region_variants  # noqa: E402

# family -> (region, sm of its variant space, wide space, SMs its non-ring PTX is built for)
FAMILIES = {
    "dw3x3s1_c256_hswish": (DwConvRegion(3, 1, "hardswish", 256), 90, False, (90, 87)),
    "dw5x5s1_c384_none": (DwConvRegion(5, 1, "none", 384), 90, False, (90,)),
    "dw3x3s2_c64_hswish": (DwConvRegion(3, 2, "hardswish", 64), 90, False, (90,)),
    "dw3x3s1_dyn_hswish": (DwConvRegion(3, 1, "hardswish", None), 90, False, (90,)),
    "dw5x5s1_dyn_relu_wide": (DwConvRegion(5, 1, "relu", None), 90, True, (90,)),
    "dw7x7s2_c64_gelu_nobias": (DwConvRegion(7, 2, "gelu", 64, has_bias=False), 90, False, (90, 87)),
    "dw7x7s1_c128_relu6": (DwConvRegion(7, 1, "relu6", 128), 87, False, (87,)),
    "pw_c32to128_hswish": (Conv1x1Region("hardswish", 32, 128), 0, False, (90, 87)),
    "pw_dyn_wide": (Conv1x1Region("none", None, None), 0, True, (90,)),
    "pw_grouped_dyn_silu": (Conv1x1Region("silu", None, None, 16, 16), 0, False, (90, 87)),
    "litemla_joined": (LiteMLARegion(16, 1e-15, True, 384), 0, False, (90, 87)),
    "litemla_prejoined": (LiteMLARegion(32, 1e-15, False, None), 0, False, (90,)),
}


def kind(name: str) -> str:
    """What a variant's name says about the code paths it takes (depthwise: the stage with its ring
    depth, strip weights/prefetch/min-blocks, TMA output and weight split; 1x1: simt or mma)."""
    return re.sub(r"\d+", "#", name.split("_")[0])


def sample() -> list[tuple[str, int, object]]:
    """(family, space sm, variant) of the sample: every 7th point, the first and the last, and the
    first point of every kind (see ``kind``) per family that those miss."""
    out = []
    for fam, (region, sm, wide, _) in FAMILIES.items():
        space = region_variants(region, sm=sm, wide=wide)  # type: ignore[arg-type]
        pick = set(range(0, len(space), 7)) | {len(space) - 1}
        seen = {kind(space[i].name) for i in pick}
        for i, v in enumerate(space):
            if kind(v.name) not in seen:
                seen.add(kind(v.name))
                pick.add(i)
        out += [(fam, sm, space[i]) for i in sorted(pick)]
    return out


def namespace_of(variant: object) -> str:
    ns = getattr(variant, "namespace", "")
    if ns:
        return ns
    m = re.search(r"namespace (\w+) \{", variant.body)  # type: ignore[attr-defined]
    assert m, variant
    return m.group(1)


def normalise(ptx: str, ns: str) -> str:
    """Replace the namespace (mangled ``<len><ns>`` first, then bare) with ``NS``."""
    return ptx.replace(f"{len(ns)}{ns}", "NS").replace(ns, "NS")


def ptx_of(job: tuple[str, str, str, int, Path]) -> tuple[str, str]:
    key, body, ns, sm, tmp = job
    stem = re.sub(r"\W", "_", key)
    cu, ptx = tmp / f"{stem}.cu", tmp / f"{stem}.ptx"
    cu.write_text(PRELUDE + body)
    p = subprocess.run([find_nvcc() or "nvcc", "-ptx", "-O3", "-std=c++17", f"-arch=sm_{sm}", "-o", str(ptx), str(cu)],
                       capture_output=True, text=True)
    if p.returncode:
        return key, "COMPILE FAILED: " + p.stderr[-500:]
    text = normalise(ptx.read_text(), ns)
    keep = os.environ.get("YTK_PTX_KEEP")
    if keep:  # the normalised PTX, for diffing a mismatch
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / f"{stem}.ptx").write_text(text)
    return key, hashlib.sha256(text.encode()).hexdigest()


def jobs(tmp: Path) -> list[tuple[str, str, str, int, Path]]:
    out = []
    for fam, sm_space, v in sample():
        ring = v.params.get("stage") in ("tma", "mma")  # type: ignore[attr-defined]
        for sm in (90,) if ring else FAMILIES[fam][3]:
            key = f"{fam}/sm{sm_space}/{v.name}@sm_{sm}"  # type: ignore[attr-defined]
            out.append((key, v.body, namespace_of(v), sm, tmp))  # type: ignore[attr-defined]
    return out


def run(n_jobs: int) -> dict[str, str]:
    with tempfile.TemporaryDirectory() as d:
        js = jobs(Path(d))
        print(f"{len(js)} PTX builds of {len({j[0].split('@')[0] for j in js})} variants", file=sys.stderr, flush=True)
        with ThreadPoolExecutor(n_jobs) as pool:
            return dict(pool.map(ptx_of, js))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("record", "compare"))
    ap.add_argument("file", type=Path)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    a = ap.parse_args()
    if find_nvcc() is None:
        sys.exit("nvcc not found")
    now = run(a.jobs)
    if a.mode == "record":
        a.file.write_text(json.dumps(now, indent=1, sort_keys=True))
        failed = [k for k, h in now.items() if h.startswith("COMPILE")]
        print(f"recorded {len(now)} PTX hashes to {a.file}" + (f"; {len(failed)} failed: {failed}" if failed else ""))
        return
    before = json.loads(a.file.read_text())
    rows, same = [], 0
    for key in sorted(set(before) | set(now)):
        b, n = before.get(key, "missing"), now.get(key, "missing")
        ok = b == n and not b.startswith("COMPILE")
        same += ok
        rows.append((key, "identical" if ok else f"DIFFERS ({b[:12]} -> {n[:12]})"))
    w = max(len(k) for k, _ in rows)
    print(f"{'family/space/variant@ptx arch':{w}}  PTX")
    for k, r in rows:
        print(f"{k:{w}}  {r}")
    fams = {k.split("/")[0] for k, _ in rows}
    print(f"\n{same}/{len(rows)} PTX builds identical ({len({k.split('@')[0] for k, _ in rows})} variants, "
          f"{len(fams)} families); normalised: the variant's namespace only")
    sys.exit(0 if same == len(rows) else 1)


if __name__ == "__main__":
    main()

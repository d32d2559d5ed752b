#!/usr/bin/env python3
"""The admission gate against planted kernels: each one is wrong or cheats in one way; none may pass.

The region is real: `ytk embedded prepare` carves the depthwise 3x3 + folded BN + hardswish of
tests/data/tiny_dw_model.py (3 sites, 1x64x128x128). Every kernel below is a naive CUDA kernel for
it in the launcher ABI, built and gated exactly as a user's plugin is:

    ytk embedded build-plugin -a ARCH --plugin-name DwS -s <planted>.module_source.py -o <planted>.so \\
        --candidates <prepare dir>/candidates.json -p fp16

and the verdict is read from <planted>.so.admission.json (beside <planted>.so.rejected when rejected).
Only `exact` may be admitted. Prints one table (--json for the records); exit 1 when any planted
kernel was admitted or the exact one was not (on a machine without a GPU every verdict is
`unverified`: the suite then checks that every kernel builds and nothing is admitted).

    python benchmarks/admission_suite.py [--workdir DIR] [--only NAME,...] [--generated] [--json]

--generated adds the installed kernel generator's own kernel for the region (`ytk kernelgen compile`),
which must be admitted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "tests" / "data" / "tiny_dw_model.py"
SELECTOR = "yasp::DwS=ConvNormAct@where=blocks.*.depth_conv"

HEADER = ('#include <cuda_runtime.h>\n#include <cuda_fp16.h>\n#include <cstdint>\n'
          'extern "C" int ytk_launch_DwS(const void* const*, void* const*, const int64_t*, void*, cudaStream_t);\n')

#: the exact kernel; each planted one changes one marked piece. One thread per output element (NHWC).
KERNEL = r"""
__device__ unsigned int g_launches = 0;
__device__ unsigned int g_ticket = 0;
__device__ __half g_memo[1 << 22];

__global__ void dws_kernel(const __half* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                           __half* y, int N, int C, int H, int W, int mode) {
  long long total = (long long)N * H * W * C;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  /*@skip@*/
  if (i >= total) return;
  int c = (int)(i % C);
  long long p = i / C;
  int xw = (int)(p % W); p /= W;
  int xh = (int)(p % H);
  int n = (int)(p / H);
  float acc = b[c];
  for (int dy = -1; dy <= 1; ++dy)
    for (int dx = -1; dx <= 1; ++dx) {
      int hh = xh + dy, ww = xw + dx;
      if (hh < 0 || hh >= H || ww < 0 || ww >= W) continue;
      acc += __half2float(x[(((long long)n * H + hh) * W + ww) * C + c]) * w[c * 9 + (dy + 1) * 3 + (dx + 1)];
    }
  float v = acc * fminf(fmaxf(acc + 3.f, 0.f), 6.f) * (1.f / 6.f);
  /*@value@*/
  y[i] = __float2half(v);
  /*@after@*/
}

extern "C" int ytk_launch_DwS(const void* const* in, void* const* out, const int64_t* e, void* ws,
                              cudaStream_t stream) {
  int N = (int)e[0], C = (int)e[1], H = (int)e[2], W = (int)e[3];
  long long total = (long long)N * H * W * C;
  int threads = 256;
  int blocks = (int)((total + threads - 1) / threads);
  static int calls = 0;
  int mode = calls++;
  /*@launch@*/
  dws_kernel<<<blocks, threads, 0, stream>>>((const __half*)in[0], (const float*)in[1], (const float*)in[2],
                                             (__half*)out[0], N, C, H, W, mode);
  /*@post@*/
  return (int)cudaGetLastError();
}
"""

#: name -> (what it does wrong, {marker: replacement})
PLANTED: dict[str, tuple[str, dict[str, str]]] = {
    "exact": ("nothing: the correct kernel", {}),
    "zeros": ("writes zeros", {"value": "v = 0.f;"}),
    "left_edge": ("halves the image's left column (a boundary bug)", {"value": "if (xw == 0) v = 0.5f * v;"}),
    "memorised": ("computes once, then replays the first output it memorised (correct on the first case only)",
                  {"value": "if (mode == 0) { if (i < (1 << 22)) g_memo[i] = __float2half(v); } "
                            "else if (i < (1 << 22)) { y[i] = g_memo[i]; return; }"}),
    "race": ("blocks race for a ticket and the winner's order leaks into the output (non-deterministic)",
             {"skip": "__shared__ unsigned int t; if (threadIdx.x == 0) t = atomicAdd(&g_ticket, 1u); "
                      "__syncthreads();",
              "value": "if ((t + blockIdx.x) & 1) v = v * (1.f + 1.f / 1024.f);"}),
    "legacy_stream": ("launches on the legacy default stream, not the one it is given",
                      {"launch": "stream = 0;"}),
    "own_stream": ("launches on a stream of its own",
                   {"launch": "static cudaStream_t own = nullptr; "
                              "if (!own) cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking); stream = own;"}),
    "far_write": ("also writes 6 MB past the end of its output",
                  {"after": "if (i == 0) y[total + (3 << 20)] = __float2half(0.f);"}),
    "input_write": ("writes into its input",
                    {"after": "if (i == total - 1) ((__half*)x)[0] = __float2half(0.f);"}),
    "guard_write": ("writes one element past the end of its output",
                    {"after": "if (i == total - 1) y[total] = __float2half(0.f);"}),
    "unwritten_tail": ("never writes the last output element", {"value": "if (i == total - 1) return;"}),
    "fp16_overflow": ("scales through fp16 and overflows on large values",
                      {"value": "v = __half2float(__float2half(v * 30000.f)) / 30000.f;"}),
    "nan_tile": ("writes NaN on one tile", {"value": "if (blockIdx.x == 7) v = __int_as_float(0x7fc00000);"}),
    "stops_after_8": ("does its work on the first 8 launches only (a timing cheat)",
                      {"skip": "if (g_launches > 8) return;",
                       "after": "if (i == 0) atomicAdd(&g_launches, 1u);"}),
}


def source_of(name: str) -> str:
    src = KERNEL
    for marker, code in PLANTED[name][1].items():
        tag = f"/*@{marker}@*/"
        assert tag in src, tag
        src = src.replace(tag, code)
    return src


def write_planted(name: str, path: Path) -> Path:
    from ytk_hookspecs.kernel_source import KernelSource
    from ytk_hookspecs.models import PluginMeta, TensorContract

    x = ["in0[0]", "in0[1]", "in0[2]", "in0[3]"]
    meta = PluginMeta(plugin_name="DwS", inputs=[
        TensorContract(name="x", dtype="float16", format="kHWC8", role="activation", shape=x),
        TensorContract(name="w", dtype="float32", format="kLINEAR", role="weight",
                       shape=["in1[0]", "in1[1]", "in1[2]", "in1[3]"]),
        TensorContract(name="b", dtype="float32", format="kLINEAR", role="bias", shape=["in2[0]"])],
        outputs=[TensorContract(name="y", dtype="float16", format="kHWC8", shape=x)],
        extents={"N": "in0[0]", "C": "in0[1]", "H": "in0[2]", "W": "in0[3]"}, launcher="ytk_launch_DwS",
        constraints=["C % 8 == 0"])
    KernelSource(header=HEADER, source=source_of(name), meta=meta).write(path)
    return path


def ytk_bin() -> str:
    import shutil

    here = Path(sys.executable).with_name("ytk")
    return str(here) if here.is_file() else (shutil.which("ytk") or "ytk")


def prepare(work: Path) -> Path:
    prep = work / "prepare"
    if (prep / "candidates.json").is_file():
        return prep
    r = subprocess.run([ytk_bin(), "embedded", "prepare", str(MODEL), "--onnx-out", str(prep / "model.onnx"),
                        "--npz-out", str(prep / "model.npz"), "--reference-out", str(prep / "model.reference.npz"),
                        "--plugin", SELECTOR], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"prepare failed (exit {r.returncode}): {r.stderr.strip()[-500:]}")
    return prep


def local_arch() -> str:
    """An arch spec for this host and its GPU (sm90 for an H200); sm90 when there is none."""
    sm = 90
    try:
        import torch

        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            sm = p.major * 10 + p.minor
    except Exception:
        pass
    from ytk_backend_nvcc.toolchain import find_nvcc, host_arch, nvcc_version

    nvcc = find_nvcc()
    ver = (nvcc_version(nvcc) if nvcc else "") or "12.0"
    major, minor = (ver.split(".") + ["0"])[:2]
    return f"{host_arch()}-sm{sm}-linux-cu{int(major)}{int(minor)}-trt10"


def run_one(name: str, work: Path, prep: Path, arch: str, source: Path | None = None) -> dict:
    d = work / name
    d.mkdir(parents=True, exist_ok=True)
    src = source or write_planted(name, d / "DwS.module_source.py")
    so = d / "DwS.so"
    env = dict(os.environ, YTK_BUILDER="nvcc")
    r = subprocess.run([ytk_bin(), "embedded", "build-plugin", "-a", arch, "--plugin-name", "DwS", "-s", str(src),
                        "-o", str(so), "--candidates", str(prep / "candidates.json"), "-p", "fp16"],
                       capture_output=True, text=True, env=env)
    rec_path = next((p for p in (Path(str(so) + ".admission.json"), Path(str(so) + ".rejected.admission.json"))
                     if p.is_file()), None)
    rec = json.loads(rec_path.read_text()) if rec_path else None
    problems = [p for c in (rec or {}).get("cases", []) for p in c.get("problems", [])]
    what = PLANTED[name][0] if name in PLANTED else "the installed kernel generator's kernel"
    return {"kernel": name, "planted": what, "exit": r.returncode,
            "verdict": rec["status"] if rec else "no verdict",
            "why": (problems[0] if problems else (rec or {}).get("reason", "")) if rec else r.stderr.strip()[-300:],
            "cases": len((rec or {}).get("cases", [])), "record": rec}


def run_generated(work: Path, prep: Path, arch: str) -> dict:
    """The same region through the installed kernel generator (``ytk kernelgen compile``, -g the local GPU)
    and build-plugin: a real generator's kernel must be admitted."""
    import torch

    d = work / "generated"
    d.mkdir(parents=True, exist_ok=True)
    src = d / "DwS.module_source.py"
    gpu = torch.cuda.get_device_properties(0).name if torch.cuda.is_available() else "H200"
    r = subprocess.run([ytk_bin(), "kernelgen", "compile", "-r", str(prep / "plugin_candidates" / "DwS.pt2"),
                        "-g", gpu, "--config", "deployment_target=tensorrt", "-o", str(src)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return {"kernel": "generated", "planted": "the installed kernel generator's kernel", "exit": r.returncode,
                "verdict": "no kernel", "why": r.stderr.strip()[-300:], "cases": 0, "record": None}
    return run_one("generated", work, prep, arch, source=src)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--only", default="", help="comma-separated kernel names")
    ap.add_argument("--jobs", type=int, default=1, help="builds/gates at once (1 on a shared GPU)")
    ap.add_argument("--generated", action="store_true",
                    help="also gate the installed kernel generator's kernel for the region (needs a GPU)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    names = [n for n in (a.only.split(",") if a.only else PLANTED) if n]
    unknown = [n for n in names if n not in PLANTED]
    if unknown:
        print(f"error: unknown kernel(s) {', '.join(unknown)}; known: {', '.join(PLANTED)}", file=sys.stderr)
        return 2
    work = a.workdir or Path(tempfile.mkdtemp(prefix="ytk-admission-suite-"))
    prep = prepare(work)
    arch = local_arch()
    with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        rows = list(pool.map(lambda n: run_one(n, work, prep, arch), names))
    if a.generated:
        rows.append(run_generated(work, prep, arch))
    gpu = any(r["verdict"] in ("admitted", "rejected") for r in rows)
    honest = ("exact", "generated")
    bad = [r["kernel"] for r in rows if (r["verdict"] == "admitted") != (r["kernel"] in honest and gpu)]
    if a.json:
        print(json.dumps({"arch": arch, "gpu": gpu, "rows": rows, "wrong_verdicts": bad}, indent=1))
    else:
        print(f"admission suite ({arch}; {'GPU' if gpu else 'no GPU: every verdict should be unverified'})")
        print(f"{'kernel':<16} {'verdict':<11} {'exit':>4}  {'cases':>5}  why")
        for r in rows:
            print(f"{r['kernel']:<16} {r['verdict']:<11} {r['exit']:>4}  {r['cases']:>5}  {r['why'][:150]}")
        admitted = [r["kernel"] for r in rows if r["verdict"] == "admitted" and r["kernel"] not in honest]
        print(f"planted kernels admitted: {len(admitted)} of {sum(r['kernel'] not in honest for r in rows)}"
              + (f" ({', '.join(admitted)})" if admitted else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

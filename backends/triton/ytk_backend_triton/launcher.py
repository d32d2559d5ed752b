"""The C++ launcher of a launch plan: cubins embedded as byte arrays, replayed with the CUDA driver API.

The generated source defines the kernel contract's two entry points (``<launcher>`` and, when the plan
needs one, ``<workspace>``) and nothing that needs Python, libtorch or Triton at run time. The driver
API is reached through the CUDA runtime's ``cudaGetDriverEntryPoint[ByVersion]``, so the plugin links
only what every ytk plugin links (the static CUDA runtime), not ``libcuda`` itself. Each kernel's module
is loaded once per device, on first use, from the cubin of that device's SM; a device of an SM the plan
was not compiled for gets ``cudaErrorNoKernelImageForDevice``, and extents no shape case matches get
``cudaErrorInvalidValue`` -- never a launch with the wrong geometry.
"""

from __future__ import annotations

from .plan import Arg, KernelBinary, Launch, LaunchPlan

#: CUDA runtime error codes the launcher returns itself
_INVALID_VALUE = 1
_NO_KERNEL_IMAGE = 209


def _bytes_array(name: str, data: bytes) -> str:
    rows = [", ".join(f"0x{b:02x}" for b in data[i:i + 24]) for i in range(0, len(data), 24)]
    return (f"alignas(16) static const unsigned char {name}[{len(data)}] = {{\n  " + ",\n  ".join(rows) + "\n};")


def _arg_value(a: Arg, ctype: str, pointer: bool) -> str:
    if not pointer:
        v = a.value
        if ctype in ("float", "double"):
            return repr(float(v)) + ("f" if ctype == "float" else "")
        return f"({ctype}){int(v)}LL" if ctype in ("int64_t", "uint64_t") else f"({ctype}){int(v)}"
    base = {"input": f"const_cast<void*>(in[{a.index}])", "output": f"out[{a.index}]", "workspace": "ws"}[a.kind]
    return f"(void*)((char*){base} + {a.offset})" if a.offset else f"(void*){base}"


def _launch(k: int, kb: KernelBinary, launch: Launch) -> str:
    lines = []
    names = []
    for i, (a, p) in enumerate(zip(launch.args, kb.params)):
        ct = p.ctype
        lines.append(f"    {ct} a{i} = {_arg_value(a, ct, p.pointer)};")
        names.append(f"&a{i}")
    for i in range(kb.user_params, len(kb.params)):  # Triton's scratch pointers: none needed (checked)
        lines.append(f"    void* a{i} = nullptr;")
        names.append(f"&a{i}")
    gx, gy, gz = launch.grid
    params = ", ".join(names) if names else "nullptr"
    lines += [f"    void* params[] = {{{params}}};",
              f"    CUresult r = d.launch(f[{k}], {gx}u, {gy}u, {gz}u, {32 * kb.num_warps}u, 1u, 1u, "
              f"sh[{k}], (CUstream)stream, params, nullptr);",
              "    if (r != CUDA_SUCCESS) return (int)r;"]
    return "  {  // " + kb.id + "\n" + "\n".join(lines) + "\n  }"


def launcher_source(plan: LaunchPlan, ns: str, launcher: str, workspace: str | None) -> str:
    """CUDA source (host code only) implementing ``launcher`` (and ``workspace``) for ``plan``."""
    if any(c.workspace_bytes for c in plan.cases) and not workspace:
        raise ValueError("the plan needs a workspace but the contract names no workspace function")
    sms = plan.sms
    nk = len(plan.kernels)
    idx = {kb.id: i for i, kb in enumerate(plan.kernels)}
    out = ["#include <cuda.h>", "#include <cuda_runtime.h>", "#include <cstdint>", "#include <cstddef>",
           "#include <mutex>", "", f"namespace {ns} {{"]
    for i, kb in enumerate(plan.kernels):
        for sm in sms:
            out.append(_bytes_array(f"k{i}_sm{sm}", kb.cubin(sm)))
    out.append(f"static const int kSms[{len(sms)}] = {{{', '.join(map(str, sms))}}};")
    table = ",\n  ".join("{" + ", ".join(f"k{i}_sm{sm}" for sm in sms) + "}" for i in range(nk))
    out.append(f"static const unsigned char* const kCubins[{nk}][{len(sms)}] = {{\n  {table}\n}};")
    out.append(f"static const char* const kNames[{nk}] = {{"
               + ", ".join(f'"{kb.name}"' for kb in plan.kernels) + "};")
    shared = ",\n  ".join("{" + ", ".join(f"{kb.shared(sm)}u" for sm in sms) + "}" for kb in plan.kernels)
    out.append(f"static const unsigned kShared[{nk}][{len(sms)}] = {{\n  {shared}\n}};  // per SM: its build's own")
    out.append(r'''
typedef CUresult (*LoadFn)(CUmodule*, const void*);
typedef CUresult (*GetFn)(CUfunction*, CUmodule, const char*);
typedef CUresult (*AttrFn)(CUfunction, CUfunction_attribute, int);
typedef CUresult (*LaunchFn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void**, void**);
struct Driver { LoadFn load; GetFn get; AttrFn attr; LaunchFn launch; };

static cudaError_t entry(const char* sym, void** fn) {
  cudaDriverEntryPointQueryResult q;
#if CUDART_VERSION >= 12050
  cudaError_t e = cudaGetDriverEntryPointByVersion(sym, fn, 12000, cudaEnableDefault, &q);
#elif CUDART_VERSION >= 12000
  cudaError_t e = cudaGetDriverEntryPoint(sym, fn, cudaEnableDefault, &q);
#else
  cudaError_t e = cudaGetDriverEntryPoint(sym, fn, cudaEnableDefault);
  q = cudaDriverEntryPointSuccess;
#endif
  if (e == cudaSuccess && (q != cudaDriverEntryPointSuccess || *fn == nullptr)) e = cudaErrorNotSupported;
  return e;
}

static constexpr int kMaxDevices = 64;
static std::mutex g_lock;
static Driver g_drv;
static bool g_drv_ok = false;
static CUfunction g_fn[kMaxDevices][sizeof(kNames) / sizeof(kNames[0])];
static unsigned g_shared[kMaxDevices][sizeof(kNames) / sizeof(kNames[0])];  // of the cubin loaded there
static bool g_loaded[kMaxDevices];

// The functions of every kernel on the current device, loaded once; 0 or a CUDA error code.
static int functions(Driver& d, CUfunction** fns, const unsigned** shared) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return (int)e;
  if (dev < 0 || dev >= kMaxDevices) return (int)cudaErrorInvalidDevice;
  std::lock_guard<std::mutex> guard(g_lock);
  if (!g_drv_ok) {
    if ((e = entry("cuModuleLoadData", (void**)&g_drv.load)) != cudaSuccess) return (int)e;
    if ((e = entry("cuModuleGetFunction", (void**)&g_drv.get)) != cudaSuccess) return (int)e;
    if ((e = entry("cuFuncSetAttribute", (void**)&g_drv.attr)) != cudaSuccess) return (int)e;
    if ((e = entry("cuLaunchKernel", (void**)&g_drv.launch)) != cudaSuccess) return (int)e;
    g_drv_ok = true;
  }
  d = g_drv;
  if (!g_loaded[dev]) {
    int major = 0, minor = 0;
    if ((e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev)) != cudaSuccess) return (int)e;
    if ((e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev)) != cudaSuccess) return (int)e;
    int which = -1;
    for (int i = 0; i < (int)(sizeof(kSms) / sizeof(kSms[0])); ++i)
      if (kSms[i] == major * 10 + minor) which = i;
    if (which < 0) return NO_KERNEL_IMAGE;
    if ((e = cudaFree(nullptr)) != cudaSuccess) return (int)e;  // the primary context, current
    for (int k = 0; k < (int)(sizeof(kNames) / sizeof(kNames[0])); ++k) {
      CUmodule m;
      CUresult r = d.load(&m, kCubins[k][which]);
      if (r != CUDA_SUCCESS) return (int)r;
      if ((r = d.get(&g_fn[dev][k], m, kNames[k])) != CUDA_SUCCESS) return (int)r;
      g_shared[dev][k] = kShared[k][which];
      if (g_shared[dev][k] > 48 * 1024 &&
          (r = d.attr(g_fn[dev][k], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)g_shared[dev][k]))
            != CUDA_SUCCESS)
        return (int)r;
    }
    g_loaded[dev] = true;
  }
  *fns = g_fn[dev];
  *shared = g_shared[dev];
  return 0;
}
'''.replace("NO_KERNEL_IMAGE", str(_NO_KERNEL_IMAGE)))
    width = len(plan.cases[0].extents)
    conds = []
    for c in plan.cases:
        conds.append(" && ".join(f"ext[{i}] == {v}LL" for i, v in enumerate(c.extents)) or "true")
    out.append("static int shape_case(const int64_t* ext) {")
    out += [f"  if ({cond}) return {i};" for i, cond in enumerate(conds)]
    out += ["  return -1;", "}", "", f"}}  // namespace {ns}", ""]
    if workspace:
        out.append(f'extern "C" size_t {workspace}(const int64_t* ext) {{')
        out.append(f"  switch ({ns}::shape_case(ext)) {{")
        out += [f"    case {i}: return {c.workspace_bytes};" for i, c in enumerate(plan.cases)]
        out += ["    default: return 0;", "  }", "}", ""]
    out.append(f'extern "C" int {launcher}(const void* const* in, void* const* out, const int64_t* ext, void* ws, '
               "cudaStream_t stream) {")
    out.append(f"  using namespace {ns};")
    if width == 0:
        out.append("  (void)ext;")
    out += ["  (void)in; (void)out; (void)ws;",
            "  Driver d; CUfunction* f = nullptr; const unsigned* sh = nullptr;",
            "  int err = functions(d, &f, &sh);",
            "  if (err) return err;",
            "  switch (shape_case(ext)) {"]
    for ci, case in enumerate(plan.cases):
        out.append(f"  case {ci}: {{")
        out += [_launch(idx[la.kernel], plan.kernels[idx[la.kernel]], la) for la in case.launches]
        out += ["  return 0;", "  }"]
    out += [f"  default: return {_INVALID_VALUE};  // extents of no shape case the plan was compiled for",
            "  }", "}", ""]
    return "\n".join(out)

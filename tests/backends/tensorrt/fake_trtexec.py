"""A stand-in ``trtexec`` for machines without TensorRT: same flags, same files, same log lines.

It is no engine. It checks its command line the way trtexec does (an unknown flag fails; 8.x before
8.6 has no --dynamicPlugins), resolves every custom-op node of the ONNX against the plugin libraries it
was given, as TensorRT would (by namespace, name and version, from the ``.so``'s ytk self-description,
and only for the interfaces that TensorRT version loads), refuses what TensorRT refuses (arity, FP16
without --fp16), and writes ``--exportLayerInfo``/``--exportProfile``/``--exportTimes``/
``--exportOutput`` and its log in the formats of the public samples in ``tests/data/trtexec``.

From TensorRT 10 it takes ``--markDebug=a,b`` at build (each name must be a tensor a node computes; the
stand-in gives a debug tensor FP16 in an --fp16 build, else FP32, as TensorRT may) and
``--saveDebugTensors=name:file,...`` at inference, writing each file as the tensor's raw bytes with no
header, as ``DebugTensorWriter`` does; ``--help`` lists every flag it takes, one ``  --flag`` a line.

Environment: ``FAKE_TRT_VERSION`` (banner number, default 8601), ``FAKE_TRTEXEC_RECORD`` (append each
argv as a JSON line), ``FAKE_TRTEXEC_OUTPUTS`` (npz whose arrays become the outputs, and the debug
tensors), ``FAKE_TRTEXEC_NO_TIMES`` (ignore --exportTimes, as a trtexec without it would),
``FAKE_TRTEXEC_NO_DEBUG_FLAGS`` (a TensorRT 10 trtexec without --markDebug/--saveDebugTensors),
``FAKE_TRTEXEC_SKIP_DEBUG`` (debug tensors, comma-separated, it writes no file for).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

STANDARD_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "com.microsoft")
COMMON = {"--onnx", "--saveEngine", "--fp16", "--noTF32", "--int8", "--profilingVerbosity", "--exportLayerInfo",
          "--skipInference", "--shapes", "--memPoolSize", "--loadEngine", "--loadInputs", "--iterations", "--warmUp",
          "--duration", "--avgRuns", "--separateProfileRun", "--exportTimes", "--exportProfile", "--exportOutput",
          "--useCudaGraph", "--useSpinWait", "--help", "--verbose", "--plugins"}


def version() -> tuple[int, int, int, str]:
    num = os.environ.get("FAKE_TRT_VERSION", "8601")
    n = int(num)
    if len(num) >= 6:
        return n // 10000, (n // 100) % 100, n % 100, num
    return n // 1000, (n // 100) % 10, n % 100, num


MAJOR, MINOR, PATCH, NUM = version()
DYNAMIC = (MAJOR, MINOR) >= (8, 6)
LOADABLE = {"trt8-IPluginV2DynamicExt", "trt10-IPluginV3"} if MAJOR >= 10 else (
    {"trt8-IPluginV2DynamicExt"} if DYNAMIC else set())
STAMP = "[12/04/2026-10:00:00]"


def say(level: str, text: str) -> None:
    print(f"{STAMP} [{level}] {text}")


def finish(ok: bool, argv: list[str]) -> None:
    print(f"&&&& {'PASSED' if ok else 'FAILED'} TensorRT.trtexec [TensorRT v{NUM}] # trtexec {' '.join(argv)}")
    sys.exit(0 if ok else 1)


def known_flags() -> set[str]:
    known = set(COMMON)
    if DYNAMIC:
        known |= {"--dynamicPlugins", "--setPluginsToSerialize"}
    if MAJOR >= 10:
        known |= {"--staticPlugins"}
        if not os.environ.get("FAKE_TRTEXEC_NO_DEBUG_FLAGS"):
            known |= {"--markDebug", "--saveDebugTensors"}
    return known


def parse_args(argv: list[str]) -> dict[str, list[str]]:
    known = known_flags()
    opts: dict[str, list[str]] = {}
    for a in argv:
        key, _, value = a.partition("=")
        if key not in known:
            say("E", f"Unknown option: {key}")
            finish(False, argv)
        opts.setdefault(key, []).append(value)
    return opts


def registered(opts: dict[str, list[str]], argv: list[str]) -> set[tuple[str, str, str]]:
    from ytk_hookspecs.plugin_info import read_plugin_description

    regs: set[tuple[str, str, str]] = set()
    for so in opts.get("--dynamicPlugins", []):
        d = read_plugin_description(so)
        if d.engine_api not in LOADABLE:
            sym = "getCreators" if MAJOR >= 10 else "getPluginCreators"
            say("E", f"[TRT] 3: [libLoader.cpp::nvinfer1::rt::DynamicLibrary::Impl::untypedSymbolAddress::365] Error "
                     f"Code 3: Internal Error (SymbolAddress for {sym} could not be loaded, check function name "
                     "against library symbol)")
            finish(False, argv)
        regs |= {(d.namespace, d.name, d.version), ("", d.name, d.version)}
    if MAJOR >= 10:
        for so in opts.get("--plugins", []):
            say("W", "--plugins flag has been deprecated, use --staticPlugins flag instead.")
    return regs  # --plugins / --staticPlugins only dlopen: a ytk library registers nothing that way


def descriptions(opts: dict[str, list[str]]) -> dict[tuple[str, str, str], object]:
    from ytk_hookspecs.plugin_info import read_plugin_description

    out = {}
    for so in opts.get("--dynamicPlugins", []):
        d = read_plugin_description(so)
        out[(d.namespace, d.name, d.version)] = d
        out[("", d.name, d.version)] = d
    return out


def attr(node: object, name: str, default: str) -> str:
    for a in node.attribute:  # type: ignore[attr-defined]
        if a.name == name:
            return a.s.decode()
    return default


def plugin_not_found(i: int, node: object, ns: str, argv: list[str]) -> None:
    op, out0 = node.op_type, node.output[0]  # type: ignore[attr-defined]
    if MAJOR >= 10:
        say("E", f"[TRT] IPluginRegistry::getCreator: Error Code 4: API Usage Error (Cannot find plugin: {op}, "
                 f"version: {attr(node, 'plugin_version', '1')}, namespace:{ns}.)")
        say("E", f"[TRT] ModelImporter.cpp:949: While parsing node number {i} [{op} -> \"{out0}\"]:")
        say("E", "[TRT] ModelImporter.cpp:950: --- Begin node ---")
        say("E", "[TRT] ModelImporter.cpp:953: --- End node ---")
        say("E", "[TRT] ModelImporter.cpp:954: ERROR: onnxOpCheckers.cpp:781 In function checkFallbackPluginImporter:")
        print('[6] creator && "Plugin not found, are the plugin name, version, and namespace correct?"')
    else:
        say("E", f"[TRT] 3: getPluginCreator could not find plugin: {op} version: {attr(node, 'plugin_version', '1')}")
        say("E", f"[TRT] ModelImporter.cpp:771: While parsing node number {i} [{op} -> \"{out0}\"]:")
        say("E", "[TRT] ModelImporter.cpp:772: --- Begin node ---")
        say("E", "[TRT] ModelImporter.cpp:774: --- End node ---")
        say("E", "[TRT] ModelImporter.cpp:777: ERROR: builtin_op_importers.cpp:5404 In function "
                 "importFallbackPluginImporter:")
        print('[8] Assertion failed: creator && "Plugin not found, are the plugin name, version, and namespace '
              'correct?"')
    say("E", "Failed to parse onnx file")
    say("E", "Parsing model failed")
    say("E", "Failed to create engine from model or file.")
    say("E", "Engine set up failed")
    finish(False, argv)


def error9(layer: str, api: str, argv: list[str]) -> None:
    builder = "pluginV3Builder.cpp" if api == "trt10-IPluginV3" else "pluginV2Builder.cpp"
    say("E", f"Error[9]: {layer}: could not find any supported formats consistent with input/output data types")
    say("E", f"Error[9]: [{builder}::reportPluginError::24] Error Code 9: Internal Error ({layer}: could not find any "
             "supported formats consistent with input/output data types)")
    say("E", "Engine could not be created from network")
    say("E", "Building engine failed")
    say("E", "Failed to create engine from model or file.")
    say("E", "Engine set up failed")
    finish(False, argv)


def build(opts: dict[str, list[str]], argv: list[str]) -> None:
    import onnx
    from onnx import helper

    model = onnx.load(opts["--onnx"][0], load_external_data=False)
    g = model.graph
    regs = registered(opts, argv)
    descs = descriptions(opts)
    fp16 = "--fp16" in opts
    inits = {t.name for t in g.initializer}
    consumers: dict[str, int] = {}
    for n in g.node:
        for i in n.input:
            consumers[i] = consumers.get(i, 0) + 1
    layers: list[dict] = []
    plugins_used = []
    pending = None
    for i, n in enumerate(g.node):
        if n.domain not in STANDARD_DOMAINS:
            ns, ver = attr(n, "plugin_namespace", ""), attr(n, "plugin_version", "1")
            say("I", f"[TRT] No importer registered for op: {n.op_type}. Attempting to import as plugin.")
            say("I", f"[TRT] Searching for plugin: {n.op_type}, plugin_version: {ver}, plugin_namespace: {ns}")
            if (ns, n.op_type, ver) not in regs:
                plugin_not_found(i, n, ns, argv)
            say("I", f"[TRT] Successfully created plugin: {n.op_type}")
            d = descs[(ns, n.op_type, ver)]
            if d.num_inputs != len([x for x in n.input if x]) or ("float16" in d.input_dtypes and not fp16):  # type: ignore[attr-defined]
                error9(n.name, d.engine_api, argv)  # type: ignore[attr-defined]
            plugins_used.append([ns, n.op_type, ver])
            layers.append({"Name": n.name, "LayerType": "PluginV3" if d.engine_api == "trt10-IPluginV3" else "PluginV2",  # type: ignore[attr-defined]
                           "nodes": [n.name]})
            pending = None
            continue
        if pending is not None and n.op_type in ("Relu", "HardSwish", "Sigmoid", "Add") and \
                any(x in pending["outs"] for x in n.input):
            pending["Name"] += f" + {n.name}"
            pending["nodes"].append(n.name)
            pending["outs"] = list(n.output)
            pending = None
            continue
        layer = {"Name": n.name,
                 "LayerType": {"Conv": "CaskConvolution", "Transpose": "Shuffle"}.get(n.op_type, "PointWise"),
                 "nodes": [n.name], "outs": list(n.output)}
        layers.append(layer)
        pending = layer if n.op_type == "Conv" and consumers.get(n.output[0], 0) == 1 else None
    if layers:
        layers.insert(0, {"Name": f"Reformatting CopyNode for Input Tensor 0 to {layers[0]['Name']}",
                          "LayerType": "Reformat", "nodes": []})
    inputs = []
    for v in g.input:
        if v.name in inits:
            continue
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type))
        if dt == np.int64 and MAJOR < 10:
            dt = np.dtype(np.int32)
        shape = [d.dim_value for d in v.type.tensor_type.shape.dim]
        inputs.append({"name": v.name, "dtype": dt.str, "shape": shape})
    outputs = [{"name": v.name, "shape": [d.dim_value for d in v.type.tensor_type.shape.dim]} for v in g.output]
    debug = []
    if "--markDebug" in opts:
        typed = {v.name: v for v in list(g.value_info) + list(g.output)}
        computed = {o for n in g.node for o in n.output}
        for name in opts["--markDebug"][0].split(","):
            if name not in computed or name not in typed:
                say("E", f"[stand-in] --markDebug: the network has no tensor named {name}")
                finish(False, argv)
            debug.append({"name": name, "shape": [d.dim_value for d in typed[name].type.tensor_type.shape.dim],
                          "dtype": "<f2" if fp16 else "<f4"})
    engine = {"fake_trtexec": NUM, "layers": [{"Name": la["Name"], "LayerType": la["LayerType"], "nodes": la["nodes"]}
                                              for la in layers],
              "inputs": inputs, "outputs": outputs, "plugins": plugins_used, "fp16": fp16, "debug": debug}
    Path(opts["--saveEngine"][0]).write_text(json.dumps(engine))
    if "--exportLayerInfo" in opts:
        detailed = opts.get("--profilingVerbosity", [""])[0] == "detailed"
        sep = "\x1f" if MAJOR >= 10 else "\x1e"
        recs = [{"Name": la["Name"], "LayerType": la["LayerType"], "Inputs": [], "Outputs": [],
                 "TacticName": "", "StreamId": 0,
                 "Metadata": sep.join(f"[ONNX Layer: {x}]" for x in la["nodes"])} if detailed else la["Name"]
                for la in engine["layers"]]
        Path(opts["--exportLayerInfo"][0]).write_text(json.dumps(
            {"Layers": recs, "Bindings": [t["name"] for t in inputs] + [t["name"] for t in outputs]}))
    say("I", "Engine built in 1.0 sec.")
    finish(True, argv)


def split_spec(spec: str) -> list[tuple[str, str]]:
    """``name:file,...`` as trtexec splits it: on ``,``, then on the last ``:`` (a name may be quoted)."""
    out, i = [], 0
    while i < len(spec):
        if spec[i] == "'":
            j = spec.index("'", i + 1)
            name, i = spec[i + 1:j], j + 1
        else:
            end = spec.find(",", i)
            j = spec.rindex(":", i, len(spec) if end < 0 else end)
            name, i = spec[i:j], j
        assert spec[i] == ":", spec
        j = spec.find(",", i + 1)
        j = len(spec) if j < 0 else j
        out.append((name, spec[i + 1:j]))
        i = j + 1
    return out


def fmt(x: float) -> str:
    return f"{x:.6g}"


def run(opts: dict[str, list[str]], argv: list[str]) -> None:
    engine = json.loads(Path(opts["--loadEngine"][0]).read_text())
    regs = registered(opts, argv)
    if any(tuple(p) not in regs for p in engine["plugins"]):
        say("E", "[TRT] 1: [pluginV2Runner.cpp::load::300] Error Code 1: Serialization (Serialization assertion "
                 "creator failed.Cannot deserialize plugin since corresponding IPluginCreator not found in Plugin "
                 "Registry)")
        say("E", "[TRT] 4: [runtime.cpp::deserializeCudaEngine::66] Error Code 4: Internal Error (Engine "
                 "deserialization failed.)")
        finish(False, argv)
    given = dict(split_spec(opts["--loadInputs"][0])) if "--loadInputs" in opts else {}
    for t in engine["inputs"]:
        if t["name"] not in given:
            continue  # trtexec fills inputs it is given no file for with random values
        size = Path(given[t["name"]]).stat().st_size
        want = int(np.prod(t["shape"])) * np.dtype(t["dtype"]).itemsize
        if size != want:
            say("E", f"Unexpected file size for input file: {given[t['name']]}. Note: Input binding size is: {want} "
                     f"bytes but the file size is {size} bytes. Double check the size and datatype of the provided "
                     "data.")
            finish(False, argv)
    n = int(opts.get("--iterations", ["10"])[0])
    warm = float(opts.get("--warmUp", ["200"])[0])
    say("I", "Selected Device: Fake GPU (ytk tests)")
    say("I", f"TensorRT version: {MAJOR}.{MINOR}.{PATCH}")
    # Before TensorRT 10 the trace kept trtexec's own warm-up inferences (their compute starts before --warmUp ms).
    recs = [(warm * k / 4, 2.0) for k in range(3)] if MAJOR < 10 else []
    recs += [(warm + 1.5 * k, 1.0 + 0.01 * k) for k in range(n + 1)]  # one more than asked, as trtexec's depth does
    timed = [r for r in recs if r[0] >= warm]
    if opts.get("--avgRuns", ["10"])[0] == "1":
        for _, c in timed:
            say("I", f"Average on 1 runs - GPU latency: {fmt(c)} ms - Host latency: {fmt(c + 0.01)} ms "
                     "(enqueue 0.05 ms)")
    cs = sorted(c for _, c in timed)
    say("I", "=== Performance summary ===")
    say("I", f"Throughput: {fmt(1000 / cs[len(cs) // 2])} qps")
    say("I", f"GPU Compute Time: min = {fmt(cs[0])} ms, max = {fmt(cs[-1])} ms, mean = {fmt(sum(cs) / len(cs))} ms, "
             f"median = {fmt(cs[len(cs) // 2])} ms, percentile(90%) = {fmt(cs[-1])} ms, percentile(95%) = "
             f"{fmt(cs[-1])} ms, percentile(99%) = {fmt(cs[-1])} ms")
    if "--exportTimes" in opts and not os.environ.get("FAKE_TRTEXEC_NO_TIMES"):
        rows = [f"{{ \"startEnqMs\" : {fmt(s - 0.3)}, \"endEnqMs\" : {fmt(s - 0.2)}, \"startH2dMs\" : {fmt(s - 0.1)}, "
                f"\"endH2dMs\" : {fmt(s)}, \"startComputeMs\" : {fmt(s)}, \"endComputeMs\" : {fmt(s + c)}, "
                f"\"startD2hMs\" : {fmt(s + c)}, \"endD2hMs\" : {fmt(s + c + 0.1)}, \"h2dMs\" : 0.1, \"computeMs\" : "
                f"{fmt(c)}, \"d2hMs\" : 0.1, \"latencyMs\" : {fmt(c + 0.2)} }}" for s, c in recs]
        Path(opts["--exportTimes"][0]).write_text("[\n  " + "\n, ".join(rows) + "\n]\n")
    if "--exportProfile" in opts:
        count = 10
        per = [0.1 * (1 + k % 3) for k in range(len(engine["layers"]))]
        total = sum(per) * count or 1.0
        rows = [f"  {{ \"count\" : {count} }}"]
        rows += [f", {{ \"name\" : \"{la['Name']}\", \"timeMs\" : {fmt(p * count)}, \"averageMs\" : {fmt(p)}, "
                 f"\"medianMs\" : {fmt(p)}, \"percentage\" : {fmt(100 * p * count / total)} }}"
                 for la, p in zip(engine["layers"], per)]
        Path(opts["--exportProfile"][0]).write_text("[\n" + "\n".join(rows) + "\n]\n")
    given_out = dict(np.load(os.environ["FAKE_TRTEXEC_OUTPUTS"])) if os.environ.get("FAKE_TRTEXEC_OUTPUTS") else {}
    if "--saveDebugTensors" in opts:
        debug = {t["name"]: t for t in engine.get("debug", [])}
        for name, path in split_spec(opts["--saveDebugTensors"][0]):
            if name not in debug:
                say("E", f"[stand-in] --saveDebugTensors: {name} is not a debug tensor of this engine")
                finish(False, argv)
            if name in os.environ.get("FAKE_TRTEXEC_SKIP_DEBUG", "").split(","):
                continue  # as if TensorRT never called the listener for it
            t = debug[name]
            v = given_out.get(name, np.zeros(t["shape"], np.float32)).reshape(t["shape"])
            Path(path).write_bytes(np.ascontiguousarray(v.astype(t["dtype"])).tobytes())
    if "--exportOutput" in opts:
        parts = []
        for t in engine["outputs"]:
            v = given_out.get(t["name"], np.zeros(t["shape"], np.float32)).reshape(-1)
            parts.append(f"{{ \"name\" : \"{t['name']}\"\n  , \"dimensions\" : \"{'x'.join(str(d) for d in t['shape'])}"
                         f"\"\n  , \"values\" : [ {', '.join(fmt(float(x)) for x in v)} ]\n  }}")
        Path(opts["--exportOutput"][0]).write_text("[\n  " + "\n, ".join(parts) + "\n]\n")
    finish(True, argv)


def main() -> None:
    argv = sys.argv[1:]
    print(f"&&&& RUNNING TensorRT.trtexec [TensorRT v{NUM}] # trtexec {' '.join(argv)}")
    if os.environ.get("FAKE_TRTEXEC_RECORD"):
        with open(os.environ["FAKE_TRTEXEC_RECORD"], "a") as f:
            f.write(json.dumps({"argv": argv, "cwd": os.getcwd()}) + "\n")
    opts = parse_args(argv)
    if "--help" in opts:
        print("=== Model Options ===\n  --onnx=<file>               ONNX model")
        for flag in sorted(known_flags() - {"--onnx"}):
            print(f"  {flag:<34} (stand-in)")
        finish(True, argv)
    if "--onnx" in opts:
        build(opts, argv)
    if "--loadEngine" in opts:
        run(opts, argv)
    say("E", "Model missing or format not recognized")
    finish(False, argv)


if __name__ == "__main__":
    main()

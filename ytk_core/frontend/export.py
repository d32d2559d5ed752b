"""torch.export + torch's own ONNX exporter, with failures turned into errors that name the module."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import sys
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import UsageError


class _TorchStderrFilter:
    """sys.stderr, less what torch's own code prints there: a failed torch.export prints its partial FX
    graph (pages of generated code) before it raises, and ytk says what failed in one line. Everything
    else (ytk's log lines, the progress display) goes through; what was held back is kept for -v."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.held = io.StringIO()

    def write(self, text: str) -> int:
        caller = str(sys._getframe(1).f_globals.get("__name__", ""))
        if caller == "torch" or caller.startswith("torch."):
            return self.held.write(text)
        return self.real.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@contextlib.contextmanager
def quiet_exporter() -> Iterator[None]:
    """The exporters print progress and warnings on stdout/stderr; ytk's stdout is for results only."""
    from ..logs import get_logger

    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch._dynamo", "torch.export", "torch._export",
                                                "onnxscript", "onnx_ir", "torch.fx.experimental.symbolic_shapes",
                                                "torch._subclasses.fake_tensor")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    # fake_tensor logs, at ERROR and with a traceback, an op that fails on fake tensors -- the model's own error,
    # which export raises again and ytk reports as one line naming the model's file and line
    loggers[-1].setLevel(logging.CRITICAL)
    sink = io.StringIO()
    err = _TorchStderrFilter(sys.stderr)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(sink), contextlib.redirect_stderr(err):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, lv in zip(loggers, levels):
            lg.setLevel(lv)
        if err.held.getvalue().strip():
            get_logger().debug("what torch printed on stderr while exporting", text=err.held.getvalue()[-20000:])


class _ModuleTracker:
    """Forward pre/post hooks that remember which module was running when export failed."""

    def __init__(self, model: Any) -> None:
        self.stack: list[tuple[str, str]] = []
        self.failed_at: list[tuple[str, str]] | None = None
        self.handles = []
        for name, mod in model.named_modules():
            self.handles.append(mod.register_forward_pre_hook(self._pre(name, type(mod).__name__)))
            self.handles.append(mod.register_forward_hook(self._post()))

    def _pre(self, name: str, cls: str):  # type: ignore[no-untyped-def]
        def hook(mod, args):  # type: ignore[no-untyped-def]
            self.stack.append((name, cls))
        return hook

    def _post(self):  # type: ignore[no-untyped-def]
        def hook(mod, args, out):  # type: ignore[no-untyped-def]
            if self.stack:
                self.stack.pop()
        return hook

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


#: What to do when torch.export cannot trace the model.
_TRACE_ADVICE = ("torch.export needs a graph without data-dependent Python control flow and with ops it can trace; "
                 "rewrite that part of the model (or move it out of Model.forward) and run the command again.")
#: What to do when the traced program has an op torch's ONNX exporter cannot translate.
_ONNX_ADVICE = ("torch's ONNX exporter cannot translate that op as the model spells it (ytk's rewrites of the "
                "spellings it knows did not help); write that part of the model with other ops for the same math "
                "and run the command again.")


def _failure_message(stage: str, e: BaseException, model_path: Path, where: list[tuple[str, str]] | None,
                     advice: str = _TRACE_ADVICE) -> str:
    text = _ANSI.sub("", str(e)).strip()
    first = text.splitlines()[0] if text else type(e).__name__
    first = first[:400]
    loc = ""
    for fr in reversed(traceback.extract_tb(e.__traceback__)):
        if Path(fr.filename).resolve() == model_path.resolve():
            loc = f" at {model_path.name}:{fr.lineno} ({(fr.line or '').strip()})"
            break
    mod = ""
    if where:
        path, cls = where[-1]
        mod = f" in module {path or '<root>'} ({cls})"
    return f"{stage} failed{mod}{loc}: {type(e).__name__}: {first}. {advice}"


def export_program(model: Any, args: tuple[Any, ...], model_path: Path) -> Any:
    """torch.export the model; an untraceable op is an error naming the op's module and line."""
    import torch

    from .loader import user_code

    tracker = _ModuleTracker(model)
    try:
        with quiet_exporter(), user_code(model_path, "Model.forward (under torch.export)"):
            program = torch.export.export(model, args, strict=False)
    except UsageError:
        raise
    except Exception as e:
        where = list(tracker.stack) or None
        tracker.remove()
        raise _eager_failure(model, args, model_path) or \
            UsageError(_failure_message("torch.export", e, model_path, where)) from None
    finally:
        tracker.remove()
    check_outputs(program, model_path)
    return program


def _eager_failure(model: Any, args: tuple[Any, ...], model_path: Path) -> UsageError | None:
    """When torch.export fails, whether the model fails in plain torch too (a forward that raises on these
    inputs): then the model is at fault, not tracing, and the error says so. None when it runs."""
    import torch

    from .loader import user_code

    try:
        with torch.no_grad(), quiet_exporter(), user_code(model_path, "Model.forward"):
            model(*args)
    except UsageError:
        raise
    except Exception as e:  # noqa: BLE001  -- the model's own error, reported as such
        text = _ANSI.sub("", str(e)).strip()
        first = (text.splitlines() or [""])[0][:400].rstrip(".")  # torch's messages end in one already
        loc = ""
        for fr in reversed(traceback.extract_tb(e.__traceback__)):
            if Path(fr.filename).resolve() == model_path.resolve():
                loc = f" at {model_path.name}:{fr.lineno} ({(fr.line or '').strip()})"
                break
        return UsageError(f"{model_path}: Model.forward raised {type(e).__name__}{loc}: {first}. It fails in plain "
                          "torch too, on the inputs get_fwd_args() gives, so this is the model's own error, not a "
                          "limit of tracing: fix the model (or its inputs) and run the command again.")
    return None


def output_label(path: Any) -> str:
    """What the model calls an output at pytree key ``path``: the key path of a returned dict or named tuple
    (``['seg']``, ``.depth``, ``['aux'][0]``), empty where it names none (a tensor, a plain tuple or list: their
    positions are the ONNX outputs' order already)."""
    import torch

    pytree = torch.utils._pytree
    return pytree.keystr(path) if any(isinstance(k, (pytree.MappingKey, pytree.GetAttrKey)) for k in path) else ""


def _output_names(program: Any, n: int) -> list[str]:
    """:func:`output_label` of each of the ``n`` flattened outputs, from the exported program's output
    structure; empty strings where the structure is not known."""
    import torch

    pytree = torch.utils._pytree
    try:
        tree = pytree.tree_unflatten(list(range(n)), program.call_spec.out_spec)
        names = [""] * n
        for path, i in pytree.tree_flatten_with_path(tree)[0]:
            names[i] = output_label(path)
        return names
    except Exception:  # noqa: BLE001 - a name is a courtesy of the message, not a reason to fail it
        return [""] * n


def check_outputs(program: Any, model_path: Path) -> None:
    """Model.forward must return at least one tensor; None, a str or a number is the model's mistake,
    said as such (the ONNX exporter would otherwise fail later with an unrelated message)."""
    import torch

    out = [n for n in program.graph.nodes if n.op == "output"]
    leaves = torch.utils._pytree.tree_leaves(out[0].args[0]) if out and out[0].args else []
    tensors = [x for x in leaves if isinstance(x, torch.fx.Node)]
    # beside tensors, a None (an optional output left out) is the exporter's to drop; a number or a str is not
    bad = [(i, x) for i, x in enumerate(leaves) if not isinstance(x, torch.fx.Node) and x is not None]
    if tensors and not bad:
        return
    if not tensors:
        got = ", ".join(sorted({"None" if x is None else type(x).__name__ for x in leaves})) or "nothing"
    else:
        names = _output_names(program, len(leaves))
        got = ", ".join(f"output {names[i] or i}: {type(x).__name__} ({x!r:.40})" for i, x in bad)
    raise UsageError(f"{model_path}: Model.forward returned {got}, not a tensor; it must return a tensor or a "
                     "tuple, list or dict of tensors (the model's outputs), nothing else. Nothing was written.")


@contextlib.contextmanager
def exact_constant_matching() -> Iterator[None]:
    """Make the ONNX optimizer's constant patterns compare without an absolute tolerance.

    onnxscript's no-op rules match ``x + 0`` with ``abs_tol=1e-8``, so ``x + 1e-15`` (LiteMLA's eps)
    is rewritten to ``x`` and a 0/0 becomes NaN. A relative tolerance alone keeps real zeros matching.
    """
    try:
        from onnxscript.rewriter import _matcher
    except ImportError:  # a future onnxscript without this module: nothing to patch
        yield
        return
    real = _matcher.math

    class _Math:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        @staticmethod
        def isclose(a: float, b: float, *, rel_tol: float = 1e-9, abs_tol: float = 0.0) -> bool:
            return real.isclose(a, b, rel_tol=rel_tol, abs_tol=0.0)

    _matcher.math = _Math()  # type: ignore[assignment]
    try:
        yield
    finally:
        _matcher.math = real


@contextlib.contextmanager
def no_merged_subexpressions() -> Iterator[None]:
    """Keep the ONNX optimizer from merging equal computations of different modules into one node.

    Its common-subexpression pass gives every block of a model the first block's copy of a shared
    computation (a padding mask's ``masked_fill``/``expand`` that each attention layer derives from the
    same input): the ONNX then has no tensor for the other blocks' copies and the first block's region
    grows outputs the torch region lacks, so those regions cannot be carved, and the merged node's time
    is charged to the first module alone. Every other pass runs as before.
    """
    try:
        import onnx_ir as ir
        import onnx_ir.passes.common as common
        real = common.CommonSubexpressionEliminationPass
    except (ImportError, AttributeError):  # another onnx_ir: nothing to patch
        yield
        return

    class _Keep(ir.passes.InPlacePass):  # type: ignore[misc]
        def call(self, model: Any) -> Any:
            return ir.passes.PassResult(model, modified=False)

    common.CommonSubexpressionEliminationPass = _Keep
    try:
        yield
    finally:
        common.CommonSubexpressionEliminationPass = real


def export_onnx(program: Any, args: tuple[Any, ...], model_path: Path, opset: int) -> Any:
    """Export with torch's dynamo ONNX exporter; returns the ONNXProgram (model_proto + decomposed program)."""
    import torch

    from .loader import user_code

    def export() -> Any:
        with quiet_exporter(), exact_constant_matching(), no_merged_subexpressions(), \
                user_code(model_path, "Model.forward (under ONNX export)"):
            return torch.onnx.export(program, args, dynamo=True, opset_version=opset, optimize=True,
                                     verbose=False, report=False)

    try:
        return export()
    except UsageError:
        raise
    except Exception as e:
        first = e
    from .onnx_compat import onnx_compatible

    if onnx_compatible(program):  # spellings the exporter cannot take as traced, rewritten to the same values
        try:
            return export()
        except UsageError:
            raise
        except Exception:  # noqa: BLE001 -- the first failure is the one that says what the model does
            pass
    raise _onnx_failure(first, program, model_path) from None


def _onnx_failure(e: Exception, program: Any, model_path: Path) -> UsageError:
    quoted = _quoted_names(program)
    if quoted:
        # torch's FX code generator writes getattr(self.x, "name") unescaped: a '"' is a SyntaxError
        return UsageError(f"{model_path}: ONNX export failed on module {quoted[0]!r}: torch's exporter cannot "
                          "handle a '\"' in a module name (a ModuleDict key or add_module name). Rename that "
                          "module without '\"' and run the command again.")
    op = ""
    for line in str(e).splitlines():
        if "aten." in line or "Unsupported" in line or "No decomposition" in line:
            op = f" ({line.strip()[:200]})"
            break
    return UsageError(_failure_message("ONNX export" + op, e, model_path, None, _ONNX_ADVICE))


def _quoted_names(program: Any) -> list[str]:
    """Module paths (from parameter and buffer names) of ``program`` that hold a '"'."""
    try:
        names = list(program.state_dict) + [c.fqn for c in program.module_call_graph]
    except Exception:  # noqa: BLE001 - only an explanation is at stake
        return []
    return sorted({n.rsplit(".", 1)[0] if n in program.state_dict else n for n in names if '"' in n})


def torch_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("YTK_") and k not in (
        "YTK_ENGINE", "YTK_KERNELGEN", "YTK_BUILDER", "YTK_CONFIG", "YTK_DISABLE_PLUGIN_AUTOLOAD")}


def python_version() -> str:
    return sys.version.split()[0]

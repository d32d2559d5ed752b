"""Load a user's model.py: a ``Model`` class and a ``get_fwd_args()`` returning forward arguments.

Every way this can go wrong is a one-paragraph :class:`UsageError` naming the file and the fix.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from ..errors import UsageError


@dataclass
class LoadedModel:
    path: Path
    module: ModuleType
    model: Any  # torch.nn.Module in eval mode
    args: tuple[Any, ...]
    sha256: str


def _user_frame(exc: BaseException, path: Path) -> str:
    """The last traceback line inside the user's file, so the error points at their code."""
    for fr in reversed(traceback.extract_tb(exc.__traceback__)):
        if Path(fr.filename).resolve() == path:
            return f" (at {path.name}:{fr.lineno}: {fr.line})"
    return ""


def _user_line(exc: BaseException, path: Path) -> tuple[int, str] | None:
    """(line, text) of the innermost traceback frame in the user's file, if any."""
    for fr in reversed(traceback.extract_tb(exc.__traceback__)):
        if Path(fr.filename).resolve() == Path(path).resolve():
            return fr.lineno or 0, (fr.line or "").strip()
    return None


def raised_by_user(exc: BaseException, path: Path) -> bool:
    """Whether ``exc`` (a SystemExit or KeyboardInterrupt) is the model's own doing, not a real Ctrl-C.

    ``sys.exit()`` anywhere under the model's code is the model's. A KeyboardInterrupt is the model's
    when the innermost frame is a ``raise`` statement in model.py; a real Ctrl-C lands on whatever line
    was running, so one that lands elsewhere (or on a line that does not raise) stays an interrupt.
    """
    if isinstance(exc, SystemExit):
        return True
    tb = traceback.extract_tb(exc.__traceback__)
    if not tb:
        return False
    last = tb[-1]
    return (Path(last.filename).resolve() == Path(path).resolve()
            and (last.line or "").lstrip().startswith("raise"))


class _HardExit(BaseException):
    """``os._exit(code)`` called by the model's code while ytk runs it (see :func:`user_code`)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


_REAL_EXIT = os._exit
_GUARD_PID = [0]  # the process whose model code runs under the guard


def _refuse_hard_exit(code: int = 0) -> None:
    if os.getpid() != _GUARD_PID[0]:
        _REAL_EXIT(code)  # a child the model forked (a DataLoader worker) ends as multiprocessing means it to
    raise _HardExit(code)


def user_exit_error(exc: BaseException, path: Path, what: str) -> UsageError:
    """The UsageError for a ``sys.exit()`` / ``os._exit()`` / ``raise KeyboardInterrupt`` in the model's code."""
    where = _user_line(exc, path)
    at = f" at {Path(path).name}:{where[0]} ({where[1]})" if where else ""
    if isinstance(exc, _HardExit):
        act = f"called os._exit({exc.code!r})"
    elif isinstance(exc, SystemExit):
        act = f"called sys.exit({exc.code!r})" if exc.code is not None else "called sys.exit()"
    else:
        act = "raised KeyboardInterrupt"
    return UsageError(f"{path}: {what} {act}{at}; a model file must not exit or interrupt the process. Remove "
                      "the call (guard script code with `if __name__ == \"__main__\":`); nothing was written.")


@contextlib.contextmanager
def user_code(path: Path, what: str) -> Iterator[None]:
    """Run the model's own code: its sys.exit(), os._exit() or KeyboardInterrupt become a UsageError.

    ``os._exit`` would end ytk at once with the model's exit status (often 0) and nothing written, so
    it is swapped for a function that raises while the model's code runs, and put back after.
    """
    hard_exit = os._exit
    _GUARD_PID[0] = os.getpid()
    os._exit = _refuse_hard_exit
    try:
        yield
    except (SystemExit, _HardExit) as e:
        raise user_exit_error(e, path, what) from None
    except KeyboardInterrupt as e:
        if not raised_by_user(e, path):
            raise
        raise user_exit_error(e, path, what) from None
    finally:
        os._exit = hard_exit


def check_model_path(path: Path) -> None:
    """A model path every command refuses the same way: missing, a directory, not a .py file."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"model file {path} does not exist. Pass the path of a model.py that defines a Model "
                         "class and a get_fwd_args() function.")
    if path.is_dir():
        raise UsageError(f"{path} is a directory: pass the model.py file in it (a Model class and get_fwd_args())")
    if path.suffix != ".py":
        raise UsageError(f"{path} is not a Python file: pass a model.py that defines a Model class and a "
                         "get_fwd_args() function.")


def import_model_file(path: Path) -> ModuleType:
    path = Path(path)
    check_model_path(path)
    path = path.resolve()
    name = f"ytk_user_model_{hashlib.sha1(str(path).encode()).hexdigest()[:10]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    # The model's own folder goes first on sys.path so it can import its neighbours.
    sys.path.insert(0, str(path.parent))
    try:
        with user_code(path, "importing it"):
            spec.loader.exec_module(module)
    except UsageError:
        raise
    except SyntaxError as e:
        raise UsageError(f"{path} has a syntax error at line {e.lineno}: {e.msg}") from None
    except Exception as e:
        raise UsageError(f"importing {path} failed: {type(e).__name__}: {e}{_user_frame(e, path)}") from None
    finally:
        try:
            sys.path.remove(str(path.parent))
        except ValueError:
            pass
    sys.modules[name] = module
    return module


def load_model(path: Path) -> LoadedModel:
    """Import model.py, build ``Model()`` in eval mode and call ``get_fwd_args()``."""
    import torch

    path = Path(path)
    module = import_model_file(path)
    rp = path.resolve()
    missing = [n for n in ("Model", "get_fwd_args") if not hasattr(module, n)]
    if missing:
        raise UsageError(f"{path} does not define {' and '.join(missing)}. A model file needs a `Model` class "
                         "(a torch.nn.Module) and a `get_fwd_args()` function returning its forward arguments.")
    try:
        with user_code(rp, "Model()"):
            model = module.Model()
    except UsageError:
        raise
    except Exception as e:
        raise UsageError(f"{path}: Model() failed: {type(e).__name__}: {e}{_user_frame(e, rp)}") from None
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"{path}: Model() returned a {type(model).__name__}, not a torch.nn.Module")
    try:
        with user_code(rp, "get_fwd_args()"):
            raw = module.get_fwd_args()
    except UsageError:
        raise
    except Exception as e:
        raise UsageError(f"{path}: get_fwd_args() failed: {type(e).__name__}: {e}{_user_frame(e, rp)}") from None
    args = normalise_args(raw, path)
    model.eval()
    return LoadedModel(path=rp, module=module, model=model, args=args,
                       sha256=hashlib.sha256(rp.read_bytes()).hexdigest())


def input_shapes(path: Path) -> list[list[int]]:
    """The shapes ``get_fwd_args()`` gives now (``Model()`` is not built): what an autoloop's resume checks."""
    path = Path(path)
    module = import_model_file(path)
    if not hasattr(module, "get_fwd_args"):
        raise UsageError(f"{path} does not define get_fwd_args()")
    try:
        with user_code(path.resolve(), "get_fwd_args()"):
            raw = module.get_fwd_args()
    except UsageError:
        raise
    except Exception as e:
        raise UsageError(f"{path}: get_fwd_args() failed: {type(e).__name__}: {e}") from None
    return [list(a.shape) for a in normalise_args(raw, path)]


def normalise_args(raw: Any, path: Path) -> tuple[Any, ...]:
    import torch

    if isinstance(raw, torch.Tensor):
        return (raw,)
    if not isinstance(raw, (tuple, list)):
        raise UsageError(f"{path}: get_fwd_args() returned {type(raw).__name__}; it must return a tuple (or "
                         "list) of tensors, the positional arguments of Model.forward")
    if not raw:
        raise UsageError(f"{path}: get_fwd_args() returned an empty sequence; Model.forward needs its inputs")
    bad = [f"#{i} ({type(a).__name__})" for i, a in enumerate(raw) if not isinstance(a, torch.Tensor)]
    if bad:
        raise UsageError(f"{path}: get_fwd_args() must return tensors only; argument {', '.join(bad)} is not a "
                         "tensor. Bake non-tensor settings into Model instead.")
    return tuple(raw)

"""``--emit-prepare run_prepare.sh``: step 3 of the flow as a runnable script.

The plugin names sit in variables at the top (the names are the user's: they must match what
``build-plugin --plugin-name`` gives the .so). Paths are relative to the script, which changes to
its own directory first, so the script keeps working wherever the tree is moved. The YTK_*
variables prepare recorded (e.g. the example's input size) are re-exported, so the carve sees
the model at the shapes that were measured.
"""

from __future__ import annotations

import os
import stat
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from ytk_hookspecs.models.base import file_mode, replace_file
from ytk_hookspecs.models import ArtifactError

from .. import __version__
from ..artifacts import PREPARE_MANIFEST, PrepareManifest
from ..errors import UsageError
from .models import Proposal, ProposeReport

_RESERVED = {"PATH", "HOME", "PWD", "SHELL", "USER", "IFS", "OUT", "MODEL", "YTK", "HERE", "OLDPWD", "PS1", "PS2",
             "BASH", "LANG", "TERM", "TMPDIR", "UID", "PREPARE_OUT"}



class NothingToCarve(UsageError):
    """--emit-prepare found no region: propose's answer is still valid ("nothing is worth a kernel")."""

def _dq(s: str) -> str:
    """Escape for a double-quoted shell word."""
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("`", "\\`")


def _var(name: str, taken: set[str]) -> str:
    v = name if name.upper() not in _RESERVED and not name.startswith("YTK_") else f"PLUGIN_{name}"
    base, k = v, 2
    while v in taken:
        v, k = f"{base}_{k}", k + 1
    taken.add(v)
    return v


def _selector_with_var(p: Proposal, var: str) -> str:
    head, rest = p.selector.split("=", 1)
    ns = head.rsplit("::", 1)[0] + "::" if "::" in head else ""
    return f"{_dq(ns)}${{{var}}}={_dq(rest)}"


def prepare_manifest(onnx: Path) -> PrepareManifest | None:
    p = Path(onnx).parent / PREPARE_MANIFEST
    if not p.is_file():
        return None
    try:
        return PrepareManifest.read(p)
    except ArtifactError:
        return None


def default_out_dir(onnx: Path, report: ProposeReport) -> Path:
    """A carved prepare dir is re-carved in place (prepare refreshes only its own files); a base one
    gets a sibling ``gaia/`` as in the spec."""
    d = Path(onnx).parent
    return d if report.plugged else d.parent / "gaia"


def _rel(target: Path, base: Path) -> str:
    try:
        rel = os.path.relpath(Path(target).resolve(), Path(base).resolve())
    except ValueError:
        return str(Path(target).resolve())
    # Far-away files (a model.py elsewhere on the machine) read better as absolute paths.
    return str(Path(target).resolve()) if rel.split(os.sep)[:3] == ["..", "..", ".."] else rel


def script_text(report: ProposeReport, script: Path, model: Path, out_dir: Path, env: dict[str, str]) -> str:
    rows = [p for p in report.proposals if p.selector]
    here = Path(script).resolve().parent
    taken: set[str] = set()
    lines = [
        "#!/usr/bin/env bash",
        f"# Written by `ytk embedded propose` (yasp-toolkit {__version__}) on "
        f"{datetime.now(timezone.utc).date().isoformat()} from {report.source_label}"
        f"{' (SIMULATED figures)' if report.simulated else ''}.",
        "# Step 3 of the flow: carve these regions out of the ONNX as custom-op nodes.",
        "# The plugin names are yours: rename them below and pass the same name to",
        "# `ytk embedded build-plugin --plugin-name` in step 5. Extra arguments are passed to prepare.",
        "set -euo pipefail",
        "",
    ]
    word = "ms"
    plugs: list[str] = []
    for p in rows:
        var = _var(p.name, taken)
        state = "already plugged" if p.already_plugged else f"{len(p.sites)} site(s), {p.ms:.3f} {word} measured"
        lines.append(f'{var}="{_dq(p.name)}"    # {p.label}: {state}')
        plugs.append(f'  --plugin "{_selector_with_var(p, var)}"')
    lines += [
        "",
        'YTK="${YTK:-ytk}"',
        f'MODEL="${{MODEL:-{_dq(_rel(model, here))}}}"',
        # Not "OUT": that name is commonly set in users' environments and CI jobs, and would redirect the carve.
        f'PREPARE_OUT="${{PREPARE_OUT:-{_dq(_rel(out_dir, here))}}}"',
    ]
    for k, v in sorted(env.items()):
        lines.append(f'export {k}="${{{k}:-{_dq(v)}}}"    # as when the profile\'s model was prepared')
    lines += [
        "",
        'cd "$(dirname "$0")"',
        '"$YTK" embedded prepare "$MODEL" \\',
        '  --onnx-out      "$PREPARE_OUT/model.onnx" \\',
        '  --npz-out       "$PREPARE_OUT/model.npz" \\',
        '  --reference-out "$PREPARE_OUT/model.reference.npz" \\',
    ]
    lines += [f"{p} \\" for p in plugs]
    lines.append('  "$@"')
    return "\n".join(lines) + "\n"


def write_script(report: ProposeReport, script: Path, *, onnx: Path, model: Path | None,
                 out_dir: Path | None) -> Path:
    """Write the script atomically with the executable bit set."""
    man = prepare_manifest(onnx)
    if model is None:
        model = Path(man.model) if man is not None else None
    if model is None:
        raise UsageError("--emit-prepare needs the model.py to carve: pass --model (no prepare.json beside "
                         f"{onnx} records it)")
    if not [p for p in report.proposals if p.selector]:
        raise NothingToCarve("--emit-prepare: there is no region to carve (no candidate and no plugged region with "
                             "a selector on record), so no script was written")
    text = script_text(report, script, model, out_dir or default_out_dir(onnx, report), man.env if man else {})
    return write_run_script(Path(script), text)


def write_run_script(script: Path, text: str) -> Path:
    """``text`` into ``script`` atomically, executable as a linker would make it under the user's umask."""
    try:
        script.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{script.name}.", suffix=".tmp", dir=script.parent)
    except OSError as e:
        raise UsageError(f"cannot write {script}: {e.strerror}") from None
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, file_mode(executable=True) | stat.S_IRWXU)
        replace_file(tmp, script)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return script

"""Issue 29, item 4: no string from a kernel source bundle (or a request) reaches generated C/C++
unchecked. Names pasted as code are C identifiers (the same pattern for launcher and workspace);
free text goes in as a C string literal that cannot end early. A test per field."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from pydantic import ValidationError

from ytk_hookspecs.errors import StageError
from ytk_hookspecs.kernel_source import KernelSource, KernelSourceError
from ytk_hookspecs.models import PluginDescription, PluginMeta
from ytk_hookspecs.plugin_info import c_snippet, c_string_literal, read_plugin_description

EVIL = [
    "f(void){system(\"id\");} int g",
    "ws; int x",
    "a\nb",
    "a b",
    "1abc",
    "",
    "ws/*",
    "ws\u00e9",
]
CC = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def _meta(**kw) -> dict:
    base = dict(plugin_name="P", inputs=[dict(name="x", dtype="float32", shape=["in0[0]"])],
                outputs=[dict(name="y", dtype="float32", shape=["in0[0]"])], extents={"N": "in0[0]"},
                launcher="ytk_launch_P", workspace="ytk_ws_P")
    base.update(kw)
    return base


@pytest.mark.parametrize("field", ["workspace", "launcher", "plugin_name"])
@pytest.mark.parametrize("value", EVIL)
def test_identifier_fields_refuse_code(field, value):
    with pytest.raises(ValidationError):
        PluginMeta.model_validate(_meta(**{field: value}))


@pytest.mark.parametrize("value", ["a;b", "x\"y", "ns ns", "a\n"])
def test_namespace_refuses_code(value):
    with pytest.raises(ValidationError):
        PluginMeta.model_validate(_meta(plugin_namespace=value))


def test_good_identifiers_still_pass():
    m = PluginMeta.model_validate(_meta(workspace="_ws2", launcher="L"))
    assert m.workspace == "_ws2"
    assert PluginMeta.model_validate(_meta(workspace=None)).workspace is None


def test_workspace_injection_in_a_bundle_is_refused():
    import yaml

    meta_yaml = yaml.safe_dump(_meta(workspace=EVIL[0]))
    text = f"CUDA_HEADER = ''\nCUDA_SOURCE = ''\nPLUGIN_META_YAML = {meta_yaml!r}\n"
    with pytest.raises(KernelSourceError, match="workspace"):
        KernelSource.parse(text)


def test_mock_builder_refuses_unvalidated_names():
    """Defence in depth: even a PluginMeta built without validation never reaches the C file."""
    from ytk_backend_mock.builder import _c_file

    good = PluginMeta.model_validate(_meta())
    for field in ("launcher", "workspace"):
        bad = good.model_copy(update={field: EVIL[0]})
        src = KernelSource(header="", source="", meta=bad)
        with pytest.raises(StageError, match="not a C identifier"):
            _c_file(src, PluginDescription.model_construct())


TEXTS = ['"); system("id"); ("', "back\\slash\\", "tri??/graph??=", "new\nline\r\t", "*/ #include <x>",
         "\u00e9\u4e2d\U0001F600", "nul\x00byte", "?\\\"?"]


@pytest.mark.parametrize("text", TEXTS)
def test_c_string_literal_is_inert(text):
    lit = c_string_literal(text)
    body = lit[1:-1]
    assert lit[0] == lit[-1] == '"' and '"' not in body and "?" not in body and "\n" not in body
    assert all(0x20 <= ord(c) < 0x7F for c in lit)


@pytest.mark.skipif(CC is None, reason="no C compiler")
@pytest.mark.parametrize("field", ["name", "namespace", "version", "builder", "meta_yaml", "cpu_arch",
                                   "source_sha256", "launcher"])
def test_self_description_fields_round_trip_through_c(tmp_path, field):
    """Every free-text field of the self-description is compiled into the .so as a C literal; a crafted
    value (quotes, backslashes, trigraphs, newlines, non-ASCII) comes back byte for byte, even with
    trigraphs on (-std=c99 -trigraphs)."""
    evil = "".join(t for t in TEXTS if "\x00" not in t)
    desc = PluginDescription(name="P", namespace="yasp", version="1", num_inputs=1, num_outputs=1,
                             input_dtypes=["float32"], output_dtypes=["float32"], input_formats=["kLINEAR"],
                             output_formats=["kLINEAR"], sm=87, cpu_arch="x86_64", engine_api="mock-cpu",
                             launcher="L", builder="mock", source_sha256="0" * 64, meta_yaml="")
    desc = desc.model_copy(update={field: evil})
    c = tmp_path / "p.c"
    c.write_text(c_snippet(desc))
    so = tmp_path / "p.so"
    p = subprocess.run([CC, "-std=c99", "-trigraphs", "-Werror=trigraphs", "-shared", "-fPIC", "-o", so, c],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert getattr(read_plugin_description(so), field) == evil


def test_nvcc_launcher_refuses_non_identifier_symbols(tmp_path):
    """The nvcc launcher binds launcher/workspace by name: only identifiers, looked up in the library
    (never a ctypes attribute such as '_handle')."""
    from ytk_hookspecs.launcher import LauncherLibrary
    from ytk_hookspecs.errors import ContractViolation

    lib = LauncherLibrary.__new__(LauncherLibrary)
    lib.path = tmp_path / "x.so"
    lib.meta = PluginMeta.model_validate(_meta())
    import ctypes

    lib._lib = ctypes.CDLL(None)
    for name in (EVIL[0], "a b", "_handle", "_name"):
        with pytest.raises(ContractViolation):
            lib._symbol(name)
    assert lib._symbol("strlen") is not None

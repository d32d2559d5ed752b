"""Plugin self-description: embedded by a real C compiler, read back from the ELF file."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from ytk_hookspecs.models import PluginDescription
from ytk_hookspecs.plugin_info import PluginInfoError, c_snippet, read_plugin_description

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")


def _desc(**kw):
    d = dict(name="DwConv5x5s1C384", namespace="yasp", version="1", num_inputs=3, num_outputs=1,
             input_dtypes=["float16", "float16", "float16"], output_dtypes=["float16"],
             input_formats=["kHWC8", "kLINEAR", "kLINEAR"], output_formats=["kHWC8"], sm=87,
             cpu_arch="x86_64", engine_api="mock-cpu", launcher="ytk_launch", builder="test",
             source_sha256="0" * 64, meta_yaml='plugin_name: "quoted \\\\ back"\n')
    d.update(kw)
    return PluginDescription(**d)


def test_roundtrip_through_a_real_shared_object(tmp_path):
    desc = _desc()
    c = tmp_path / "p.c"
    c.write_text(c_snippet(desc))
    so = tmp_path / "p.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", so, c], check=True)
    assert read_plugin_description(so) == desc
    import ctypes

    lib = ctypes.CDLL(str(so))
    lib.ytk_plugin_info.restype = ctypes.c_char_p
    assert PluginDescription.model_validate_json(lib.ytk_plugin_info()) == desc


def test_plain_so_is_a_clear_error(tmp_path):
    c = tmp_path / "q.c"
    c.write_text("int f(void){return 1;}\n")
    so = tmp_path / "q.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", so, c], check=True)
    with pytest.raises(PluginInfoError, match="no ytk self-description"):
        read_plugin_description(so)
    (tmp_path / "t.so").write_bytes(b"not elf")
    with pytest.raises(PluginInfoError, match="not an ELF"):
        read_plugin_description(tmp_path / "t.so")


def test_a_carried_contract_that_does_not_read_is_a_value_error():
    """compile exited 1 (RecursionError) on a .so whose meta_yaml was 3000 nested brackets."""
    import pytest

    from ytk_hookspecs.models import PluginDescription

    d = PluginDescription(name="X", namespace="yasp", version="1", num_inputs=1, num_outputs=1,
                          input_dtypes=["float16"], output_dtypes=["float16"], input_formats=["kLINEAR"],
                          output_formats=["kLINEAR"], sm=90, cpu_arch="x86_64", engine_api="mock-cpu",
                          launcher="launch", builder="mock", source_sha256="0" * 64)
    for bad, says in (("[" * 3000, "too deeply nested"), ("a: [", "not YAML"), ("3", "validation error")):
        with pytest.raises(ValueError, match=says):
            d.model_copy(update={"meta_yaml": bad}).plugin_meta()

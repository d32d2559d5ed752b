"""The launcher ABI from Python: LauncherLibrary and torch_launch on a real GPU (skipped without one)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from test_nvcc_builder import X86_SM90, scale_bundle  # noqa: E402
from ytk_hookspecs import StageContext  # noqa: E402
from ytk_hookspecs.errors import ContractViolation, StageError  # noqa: E402
from ytk_hookspecs.models import BuildRequest  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def lib(tmp_path_factory):  # type: ignore[no-untyped-def]
    import torch

    from ytk_hookspecs.launcher import LauncherLibrary
    from ytk_backend_nvcc.plugin import NvccBuilder

    p = torch.cuda.get_device_properties(0)
    arch = X86_SM90.replace("sm90", f"sm{p.major}{p.minor}")
    d = tmp_path_factory.mktemp("scale")
    so = d / "Scale.so"
    NvccBuilder().build_plugin(BuildRequest(source=scale_bundle(d / "Scale.module_source.py"), plugin_name="Scale",
                                            arch=arch, output=so), StageContext())
    return LauncherLibrary(so)


def test_torch_launch_runs_the_kernel_on_the_current_stream(lib) -> None:  # type: ignore[no-untyped-def]
    import torch

    x = torch.randn(2, 16, 5, 7, device="cuda").half().contiguous(memory_format=torch.channels_last)
    y = torch.full_like(x, float("nan"))
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        from ytk_hookspecs.launcher import torch_launch

        torch_launch(lib, [x], [y])
    s.synchronize()
    assert torch.equal(y, x * 2)
    assert lib.workspace_bytes(lib.extents([list(x.shape)])) == 2 * 64


def test_contract_violations_are_caught_before_launch(lib) -> None:  # type: ignore[no-untyped-def]
    import torch

    from ytk_hookspecs.launcher import torch_launch

    x = torch.randn(1, 16, 4, 4, device="cuda").half()
    y = torch.empty_like(x).contiguous(memory_format=torch.channels_last)
    with pytest.raises(ContractViolation, match="channels_last"):
        torch_launch(lib, [x], [y])  # NCHW where kHWC8 is declared
    xc = x.contiguous(memory_format=torch.channels_last)
    with pytest.raises(ContractViolation, match="dtype"):
        torch_launch(lib, [xc.float()], [y])
    with pytest.raises(ContractViolation, match="shape"):
        torch_launch(lib, [xc], [y[:, :, :2]])
    with pytest.raises(ContractViolation, match="aliases"):
        torch_launch(lib, [xc], [xc])


def test_launcher_error_codes_become_stage_errors(lib) -> None:  # type: ignore[no-untyped-def]
    import torch

    x = torch.randn(1, 12, 4, 4, device="cuda").half()
    with pytest.raises(StageError, match=r"cudaError 1 \(invalid argument\)"):
        lib.launch([x.data_ptr()], [x.data_ptr()], [1, 12, 4, 4], None, None)  # C % 8 != 0 -> cudaErrorInvalidValue

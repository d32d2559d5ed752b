"""Test-only: put on PYTHONPATH of a Gaia service to make the mock generator's jobs take
``YTK_TEST_SLOW_KERNELGEN_S`` seconds (its nvcc builds ``YTK_TEST_SLOW_BUILD_S``), so a test can kill a client, cancel a
job or kill a Ray worker mid-job. Nothing in
ytk reads it."""

import os

if os.environ.get("YTK_TEST_SLOW_KERNELGEN_S"):
    import time

    import ytk_backend_mock.plugin as _mock

    _submit = _mock.MockBackend.submit

    def _slow_submit(self, request, ctx):  # type: ignore[no-untyped-def]
        time.sleep(float(os.environ["YTK_TEST_SLOW_KERNELGEN_S"]))
        return _submit(self, request, ctx)

    _mock.MockBackend.submit = _slow_submit

if os.environ.get("YTK_TEST_SLOW_BUILD_S"):  # the same for the nvcc builder's builds
    import time

    import ytk_backend_nvcc.plugin as _nvcc

    _build = _nvcc.NvccBuilder.build_plugin

    def _slow_build(self, request, ctx):  # type: ignore[no-untyped-def]
        time.sleep(float(os.environ["YTK_TEST_SLOW_BUILD_S"]))
        return _build(self, request, ctx)

    _nvcc.NvccBuilder.build_plugin = _slow_build

"""Test-only: put on PYTHONPATH of a Gaia service to make the mock generator's jobs take
``YTK_TEST_SLOW_KERNELGEN_S`` seconds, so a test can kill a client (or cancel a job) mid-job. Nothing in
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

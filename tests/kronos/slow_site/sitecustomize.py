"""Test-only: put on PYTHONPATH of a worker to make its mock engine's compile take
``YTK_TEST_SLOW_COMPILE_S`` seconds, so a test can kill the worker mid-job. Nothing in ytk reads it."""

import os

if os.environ.get("YTK_TEST_SLOW_COMPILE_S"):
    import time

    import ytk_backend_mock.plugin as _mock

    _compile = _mock.MockBackend.compile

    def _slow_compile(self, request, ctx):  # type: ignore[no-untyped-def]
        time.sleep(float(os.environ["YTK_TEST_SLOW_COMPILE_S"]))
        return _compile(self, request, ctx)

    _mock.MockBackend.compile = _slow_compile

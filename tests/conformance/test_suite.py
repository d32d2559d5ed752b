"""The conformance suite ytk-hookspecs ships (``pytest --ytk-backend NAME``), run against every installed backend."""

from ytk_hookspecs.testing.suite import *  # noqa: F401,F403

"""The Kronos worker: an HTTP service on the target that builds and profiles engines for ytk clients.

``ytk worker kronos --engine torch|tensorrt|mock`` serves the API in :mod:`.app`; each job runs the
core's own compile (:func:`ytk_core.stages.compile.run_compile`) in a child process (:mod:`.runner`),
one at a time per GPU (:mod:`.scheduler`), its record kept on disk (:mod:`.store`). The client is the
core's (:mod:`ytk_core.kronos`).
"""

__version__ = "0.1.0"

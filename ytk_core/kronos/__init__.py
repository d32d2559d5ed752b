"""Compiling on a remote target: the Kronos worker's wire protocol and its client.

``ytk worker kronos`` (the ``ytk-backend-kronos`` distribution) runs on the target and builds and
profiles engines there; ``ytk embedded compile --worker URL`` and ``ytk autoloop --worker URL`` send it
their compiles through :func:`.remote_compile.compile_on_worker`. The models both sides speak live here,
with the client, so the core never imports a backend and the worker (which depends on the core) reads
the same definitions.
"""

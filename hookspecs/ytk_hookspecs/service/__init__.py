"""What ytk's HTTP workers and their clients share: the pieces every job service needs once.

``ytk worker kronos`` (engines on the target) and ``ytk worker gaia`` (kernel generation and plugin
builds) are both job services: a client uploads a gzip'd tar under an idempotency key, the worker
unpacks it without trusting it, keeps a restart-safe record per job, and answers polls; the client
retries what a retry can fix. Those pieces live here, once:

==================  ===================================================================================
:mod:`.protocol`    the wire basics both speak: header names, :class:`ErrorBody`, :class:`LogChunk`
:mod:`.archive`     deterministic job archives and their safe extraction (:func:`safe_extract`)
:mod:`.store`       job records on disk, written atomically, recovered after a restart (:class:`JobStore`)
:mod:`.auth`        bearer tokens compared in constant time, several named keys per service
:mod:`.http`        the client: httpx with tenacity retries on transport errors, 429 and 5xx
==================  ===================================================================================

They need the ``service`` extra of ytk-hookspecs (fastapi, uvicorn, httpx, tenacity); nothing else
in ytk_hookspecs imports them.
"""

#: The subpackage's modules are imported by name (``ytk_hookspecs.service.http``); it exports nothing itself.
__all__: list[str] = []

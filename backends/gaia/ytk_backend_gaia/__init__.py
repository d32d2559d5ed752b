"""Gaia: kernel generation and plugin builds as a service, and the backend that uses it.

The service (``ytk worker gaia``, :mod:`.app`) runs the kernel generators and the plugin builder
installed beside it (found through :class:`ytk_hookspecs.loader.PluginLoader`, as the core finds
them), one job at a time per slot in child processes (:mod:`.dispatch`), or as Ray tasks on a
cluster. The client (:mod:`.plugin`) is the ``gaia`` backend: roles ``kernelgen`` and ``builder``
over the HTTP API (:mod:`.protocol`), so ``--kernelgen gaia`` / ``--builder gaia`` is the only
change a user makes.
"""

__version__ = "0.1.0"

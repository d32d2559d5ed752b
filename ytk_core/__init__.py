"""yasp-toolkit core: CLI, plugin manager, backend selection, artifacts and the stages."""

__version__ = "0.1.0"

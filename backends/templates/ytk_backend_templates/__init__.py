"""ytk-backend-templates: kernels from parameterised CUDA templates, autotuned on the local GPU."""

__version__ = "0.2.0"

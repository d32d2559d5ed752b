"""ytk-backend-triton: Triton kernels compiled ahead of time into cubins, launched by a generated C launcher."""

__version__ = "0.1.0"

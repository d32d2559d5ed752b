"""ytk-backend-nvcc: builds kernel source bundles into plugin .so files with nvcc."""

__version__ = "0.1.0"

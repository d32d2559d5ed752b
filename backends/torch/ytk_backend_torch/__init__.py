"""ytk's torch engine backend: a real GPU engine on PyTorch for machines without TensorRT."""

__version__ = "0.1.0"

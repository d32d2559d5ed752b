"""The built-in frontend: torch.export tracing, ONNX export, FX-node mapping and carving."""

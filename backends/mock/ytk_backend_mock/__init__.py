"""A simulated DRIVE AGX Orin running TensorRT 8.6: every figure it produces is labelled simulated."""

"""A simulated DRIVE AGX Orin running TensorRT 8.6: every figure it produces is labelled simulated.

Modules: ``graph`` (ONNX with concrete shapes), ``cost_model`` (bytes/FLOPs vs the target's
roofline), ``fusion`` (TensorRT-style layers, names, formats, reformats), ``engine`` (compile and
profile), ``layer_info`` (trtexec-shaped dumps), ``kernelgen`` and ``builder`` (contract-valid
placeholder kernels and real self-describing .so files), ``plugin`` (the hooks).
"""

"""ytk's TensorRT engine: ONNX + plugin .so files -> a TensorRT engine, profiled on this machine's GPU.

Two runners, the same files: ``trtexec`` (the default; what DRIVE OS and JetPack ship) and the
``tensorrt`` Python package (pip installs carry no trtexec). Both leave trtexec's export files
(``--exportLayerInfo``, ``--exportProfile``, ``--exportTimes``, ``--exportOutput``), which
:mod:`.trtexec_files` reads into the engine bundle.
"""

__version__ = "0.1.0"

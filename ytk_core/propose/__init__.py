"""Step 2 of the flow, ``ytk embedded propose``: attribute every measured millisecond to a torch
module and say what to plug (and what not to).

Pipeline: ``measurement`` (bundle or trtexec files) -> ``layer_map`` + ``trt_names`` (engine layer
-> ONNX nodes) -> ``attribution`` (ONNX node -> torch module via fx_nodes.json, or glue) ->
``regions`` -> ``families`` -> ``proposals`` (roofline, thresholds, selectors via ``globs`` and
``naming``) -> ``report`` (tables) / ``emit`` (run_prepare.sh). ``propose()`` is the Python API.
"""

from .api import propose
from .models import NotWorthRow, Proposal, ProposeOptions, ProposeReport, SiteTime

__all__ = ["propose", "ProposeOptions", "ProposeReport", "Proposal", "NotWorthRow", "SiteTime"]

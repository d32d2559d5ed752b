"""Contract models passed through the hooks and written to disk (all pydantic v2, versioned)."""

from .admission import AdmissionCaseRecord, AdmissionRecord, AdmissionStatus
from .arch import GPU_NAMES, GPU_PROPERTIES, ArchSpec, ArchSpecError, GpuProperties, gpu_sm
from .backend import (CORE_CONFIG_KEYS, FORWARDED_CONFIG_KEYS, ROLE_STAGES, SELECTABLE_ROLES, Availability,
                      BackendInfo, Role, Stage)
from .base import ArtifactError, Versioned, replace_file, sha256_file, write_bytes_atomic, write_text_atomic
from .build import BuildRequest, BuildResult, EngineApi, PluginDescription
from .carve import (PLUGIN_DOMAIN, Candidate, CandidateFiles, CandidatesFile, CarveRequest, CarveResult,
                    LiftMode, PluginEntry, PluginsFile, RegionOp, SiteInfo)
from .engine import (DEBUG_TENSORS, NETWORK_OUTPUTS, CompileRequest, CompileResult, LayerTime, PluginArtifact,
                     Precision, ProfileRequest, ProfileResult, TapExposure)
from .kernel import (CandidateScore, DeploymentTarget, KernelGenRequest, KernelGenResult, KernelPerf, KernelReport,
                     PluginMeta, RegionSketch, Reoptimization, SupportAnswer, SupportRequest, TensorContract)
from .tensors import TensorInfo
from .trace import FxNode, FxNodesFile, ModuleFrame, TraceRequest, TraceResult

__all__ = [n for n in dir() if not n.startswith("_")]

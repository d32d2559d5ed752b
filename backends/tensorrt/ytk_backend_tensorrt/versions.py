"""TensorRT versions: read from trtexec's banner or a package version, and what each one can load.

trtexec opens every run with ``&&&& RUNNING TensorRT.trtexec [TensorRT v8601] # trtexec ...``. The
number is the library's ``NV_TENSORRT_VERSION``: ``major*1000 + minor*100 + patch`` up to 9.x
(``v8601`` = 8.6.1, ``v8603`` = 8.6.3) and ``major*10000 + minor*100 + patch`` from 10.0 on
(``v100100`` = 10.1.0; the 10.14 headers define ``NV_TENSORRT_VERSION_INT`` that way). Later in the
same log it prints ``TensorRT version: 8.6.3``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

BANNER = re.compile(r"\[TensorRT v(\d{4,6})\]")
VERSION_LINE = re.compile(r"TensorRT version: (\d+)\.(\d+)\.(\d+)")

#: Plugin interfaces ytk's builders produce, by what TensorRT loads them.
V2_API = "trt8-IPluginV2DynamicExt"
V3_API = "trt10-IPluginV3"


@dataclass(frozen=True, order=True)
class TrtVersion:
    major: int
    minor: int
    patch: int = 0

    @classmethod
    def parse(cls, text: str) -> "TrtVersion":
        """``8.6``, ``8.6.1``, ``8.6.1.6`` or ``10.14.1``."""
        m = re.match(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?", text)
        if not m:
            raise ValueError(f"not a TensorRT version: {text!r}")
        return cls(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))

    @classmethod
    def from_number(cls, digits: str) -> "TrtVersion":
        """The banner's ``NV_TENSORRT_VERSION`` (``8601`` -> 8.6.1, ``100100`` -> 10.1.0)."""
        n = int(digits)
        if len(digits) >= 6:  # 10.x and later: major*10000 + minor*100 + patch
            return cls(n // 10000, (n // 100) % 100, n % 100)
        return cls(n // 1000, (n // 100) % 10, n % 100)

    @classmethod
    def from_log(cls, text: str) -> "TrtVersion | None":
        """The version a trtexec log names: the ``TensorRT version:`` line, else the banner."""
        m = VERSION_LINE.search(text)
        if m:
            return cls(int(m.group(1)), int(m.group(2)), int(m.group(3)))
        m = BANNER.search(text)
        return cls.from_number(m.group(1)) if m else None

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"

    @property
    def dynamic_plugins(self) -> bool:
        """TensorRT 8.6 added plugin libraries loaded through their exported entry points
        (``IPluginRegistry::loadLibrary``, trtexec ``--dynamicPlugins``)."""
        return (self.major, self.minor) >= (8, 6)

    @property
    def plugin_flag(self) -> str:
        """How trtexec is told to load a plugin library: ``--dynamicPlugins`` from 8.6, ``--plugins`` before
        (which only dlopens the library: its creators must register themselves while it loads)."""
        return "--dynamicPlugins" if self.dynamic_plugins else "--plugins"

    @property
    def engine_api(self) -> str:
        """The interface ytk builds plugins with for this TensorRT (``trt_shim.engine_api_for``)."""
        return V3_API if self.major >= 10 else V2_API

    @property
    def loadable_apis(self) -> tuple[str, ...]:
        """Plugin interfaces this TensorRT loads from a ytk-built library: IPluginV2DynamicExt through
        ``getPluginCreators`` from 8.6, IPluginV3 through ``getCreators`` from 10 (which still loads V2)."""
        if self.major >= 10:
            return (V2_API, V3_API)
        if self.dynamic_plugins:
            return (V2_API,)
        return ()

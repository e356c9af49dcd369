"""relaytrace: map every TVM kernel, and every microsecond, back to model layers."""

from .build import build, build_pipeline, trace
from .profiler import Profile, profile
from .errors import RelaytraceError, UnknownNameError
from .lineage import Lineage
from .origins import Origin

__version__ = "0.1.0"
__all__ = ["build", "build_pipeline", "profile", "Profile", "trace", "Lineage", "Origin", "RelaytraceError", "UnknownNameError", "__version__"]

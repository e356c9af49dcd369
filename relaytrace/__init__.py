"""relaytrace: map every TVM kernel, and every microsecond, back to model layers.

The data (``Lineage``, ``Origin``, ``Profile``) is importable without TVM; ``build``,
``trace``, ``build_pipeline``, ``profile``, ``time_inside`` and ``compare`` import TVM
when first called; ``RemoteDevice`` names a device over TVM RPC for ``profile(..., remote=)``.
"""

from .build import build, build_pipeline, trace
from .errors import RelaytraceError, UnknownNameError
from .model.lineage import Lineage
from .model.origin import Origin
from .model.profile import Profile
from .profiling.remote import RemoteDevice

__version__ = "0.1.0"
__all__ = [
    "build",
    "build_pipeline",
    "compare",
    "profile",
    "Profile",
    "time_inside",
    "trace",
    "Lineage",
    "Origin",
    "RelaytraceError",
    "RemoteDevice",
    "UnknownNameError",
    "__version__",
]


def __getattr__(name: str):
    if name == "profile":  # profiling/vm.py imports TVM
        from .profiling.vm import profile

        return profile
    if name == "time_inside":  # profiling/inside.py builds an instrumented copy with TVM
        from .profiling.inside import time_inside

        return time_inside
    if name == "compare":  # analysis/comparison.py runs the build on TVM's VM
        from .analysis.comparison import compare

        return compare
    raise AttributeError(f"module 'relaytrace' has no attribute {name!r}")

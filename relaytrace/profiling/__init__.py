"""Running a build and timing it (needs TVM, but for ``runner``, which a bundle runs alone).

Modules:

- ``bundle``: a build and its lineage as a directory that profiles itself where it is
  copied
- ``inside``: each fused kernel's loop nests timed in an instrumented copy of the build
- ``inside_gpu``: the CUDA form of that copy, stages stamped by the GPU's global timer
  (built and checked, not yet run)
- ``manifest``: ``bundle.json`` and the serve spec as records, read back checked
- ``peaks``: the machine's peak rates, measured with small TVM-built kernels where a
  profile runs
- ``remote``: profiling on a device reached over TVM RPC
- ``runner``: how a run of a Relax VM is timed, call by call, with TVM's runtime alone
- ``serve``: run an LLM's entry the way it is served
- ``tasks``: MetaSchedule tuning tasks of a fused build, mapped to kernels and layers
- ``vm``: the per-call profiler on the Relax VM, here or over RPC (TVM removed its own
  in v0.24)
"""

"""How a run of a Relax VM is timed, call by call, with TVM's runtime alone: the one
copy of relaytrace's timing, used by ``profiling.vm`` here and copied whole, as the
folder ``runner/`` beside the ``run.py`` of a bundle (``relaytrace bundle``), which
profiles a build where no compiler, no ``tvm`` package and no relaytrace are installed.

So this package imports nothing of relaytrace and, at the top of each module, nothing
but the standard library and numpy; run by ``run.py`` it also imports ``tvm_ffi`` and
loads the bundle's ``libtvm_runtime.so`` (ctypes, global), then the exported library
(``vm_load_executable``, ``vm_initialization``), as TVM's own ``VirtualMachine`` does.
What it writes is ``profile.json`` in relaytrace's format: the bundle carries a
template of it (every field relaytrace knows before the run: model, target, entry,
inputs, schema) and the runner fills in the records, each site's arguments and the
end-to-end times; ``relaytrace report DIR`` reads it back with the lineage.

Modules:

- ``timing``: a run timed call by call (timeline) or each call site alone (isolated)
- ``gpu``: NVTX ranges and CUDA events around each call
- ``kvcache``: an entry that takes a KV cache, served with the runtime's builtins
- ``runtime``: TVM's runtime through ``tvm_ffi`` and ctypes, a bundle's saved inputs
- ``files``: a bundle's manifest and sealed files checked before anything is loaded
- ``rates``: the device's peak rates, from the bundle's peak kernels
- ``cli``: ``run.py``'s command line and the orchestration of one profile
- ``errors``: ``BundleError``
- ``run``: the bundle's ``run.py`` itself, which puts this package on the path and runs ``cli``
"""

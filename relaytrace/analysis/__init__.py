"""What the lineage and the profile say together, as figures renderers only read.

Modules:

- ``advice``: what to change, and what it should save
- ``attribution``: kernel time -> layers, op types and categories
- ``comparison``: which layer went wrong
- ``diff``: two profiles of one model, or one profile against external timings, layer by
  layer
- ``estimate``: an estimate for a build that cannot run here
- ``inside``: each op of each fused kernel as measured inside, beside the modelled split
- ``layer_outputs``: where each layer's output can be read in a run of the compiled
  model
- ``memory``: how much memory a compiled entry needs, and which layers hold it at the
  peak
- ``narrow``: the first op beyond the tolerance inside a fused kernel, by rebuilds
- ``observe``: a rebuild that writes out chosen layers' and ops' values (for ``compare
  --observe`` and ``narrow``)
- ``precision``: each site's and layer's dtypes, the casts and who inserted them, layers
  left in float32
- ``report``: the ``Report``: every figure of one profile, computed once for every
  renderer
- ``roofline``: why a layer is slow
- ``sweep``: each layer's time fitted against an LLM's context and batch size
- ``work_split``: how a fused kernel's time and work are cut among its ops
"""

"""The data layer: lineages, origins, pass journals, verification, profiles and op
tables as plain frozen records with schema-checked JSON. Nothing here imports TVM,
so a saved lineage and profile are loaded, queried, verified, attributed and drawn
on any machine.

Modules:

- ``build_facts``: what a build was
- ``code``: the code a build made (Relax program, kernels' TIR) linked by origin down to
  TIR blocks, and the blocks' verdicts
- ``codec``: records to JSON and back, driven by their annotations
- ``entry``: an entry function as the VM runs it
- ``frontend``: the frontend's own program, as evidence for the layers the lineage names
- ``inside``: what an instrumented copy measured inside each fused kernel
- ``journal``: the pass journal
- ``jsonio``: files written atomically, and schema-checked JSON
- ``layer_name``: a layer's name: the module path the user wrote, and which call of it
- ``lineage``: the ``Lineage``: origins, call sites, data flow, the journal and the
  verification, with queries
- ``lineage_index``: the look-ups a lineage answers queries with, built once per lineage
- ``lineage_schema``: the versions of ``lineage.json`` and the migrations that read an
  older file as the current one
- ``memory``: what the compiled program holds in memory, as its memory plan says
- ``names``: the closed sets of names the saved records hold
- ``numerics``: a numerical comparison of a compiled model against its framework, layer
  by layer
- ``ops``: what the names of ops say
- ``origin``: the ``Origin``: one op of the input model, with its stable id and layer
- ``peaks``: a device's peak rates, the roofline's ceilings: measured, given or a named
  device's
- ``profile``: the ``Profile``: every timed call of an entry, with its arguments and
  end-to-end times
- ``provenance``: ``provenance.json`` as records: kernel to blocks to the origins they
  compute at each call site
- ``roles``: an origin's part in a call site, and a site's roles from its origins
- ``run_spec``: how an output directory was made
- ``schema``: the JSON Schema of each saved file, made from its records
- ``sense``: whether a saved build's facts make sense together, beyond each field's
  type, and whether a profile is a run of that build
- ``shapes``: concrete inputs against a signature with symbolic dims (``("n", 64)``), no
  TVM
- ``sitekey``: the one identity of a kernel call site, shared by lineage, profile,
  report, renderers, the CLI and the saved files
- ``verification``: each call site's origins checked against its kernel's members; each
  layer's verdict
- ``work``: what a kernel computes, as counted from its TIR, and the same at the shapes
  it ran with
"""

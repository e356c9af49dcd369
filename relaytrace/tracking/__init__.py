"""Following origins through a traced build (needs TVM), one job per module.

Modules:

- ``ahead``: follow a build while TVM generates its code
- ``callsites``: turn the tracker's state after the last pass into a Lineage
- ``code``: the code of a recorded build: Relax functions, kernels' TIR, blocks and members
- ``entries``: entries as compiled, read from the last Relax module of a recorded build
- ``facts``: how TVM's passes rewrite Relax IR
- ``follow``: ``follow(recording) -> Lineage``
- ``ir``: read-only helpers over Relax IR, for the frontends and the reader
- ``keys``: the value-key index
- ``memory``: each entry's memory plan, read from the program ``KillAfterLastUse`` left
  (needs TVM)
- ``newops``: what a binding no rule explains is
- ``origins``: an ``Origin`` and a stable id for every op of the input
- ``params``: weights a pass moved between parameters and functions, as MLC-LLM's
  pipeline moves them
- ``printed``: a function's TVMScript and the line the printer put each of some of its
  IR objects on
- ``passlog``: the pass log the tracker keeps while it follows a build
- ``reader``: a Relax function as the tracker reads it: named records, read on demand
- ``recorder``: the PassInstrument: records what each pass left, and says when the Relax
  passes are done
- ``rules``: the rules that find the value a re-created binding is (``DEFAULT_RULES``)
- ``tokens``: tokens: the identity of a value across passes, and the origins it carries
- ``tracker``: the tracker: tokens, identity, new ops (inserted / unresolved), the pass
  journal
- ``truth``: ground truth for verification, read from a traced build's record (needs
  TVM)
- ``work``: each kernel's work counted from its TIR, as formulas over its symbolic dims
  (needs TVM)
"""

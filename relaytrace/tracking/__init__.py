"""Following origins through a traced build (needs TVM), one job per module:

- ``recorder``: the PassInstrument; during the build it only records what each pass
  left, and says when the Relax passes are done;
- ``follow``: the recording → a verified Lineage, the rest of this list in order;
- ``ahead``: ``follow`` on a second thread while TVM generates code;
- ``ir``: read-only helpers over Relax IR;
- ``reader``: a Relax function as named records read on demand;
- ``origins``: an Origin and a stable id for every op of the input;
- ``tracker``: tokens, identity, new ops (inserted / unresolved), the pass journal;
- ``rules``: the rules that search for the value a re-created binding is;
- ``callsites``: the tracker's state after the last pass as a Lineage;
- ``truth``: what each kernel is made of, read from the record, for verification.
"""

"""Renderers: each reads one precomputed ``Report`` (or a lineage) and writes text or
pictures; they change nothing.

Modules:

- ``chrome_trace``: chrome / Perfetto trace (Trace Event format)
- ``diff_graph``: layer graphs coloured by a per-layer figure
- ``explorer``: per-node data for Google's Model Explorer, keyed by the node ids its
  adapters give
- ``export``: CSV and JSON forms of the attribution tables, for spreadsheets and scripts
- ``graphviz``: graphviz pictures of a lineage, coloured by time when a ``Report`` is
  given
- ``html``: the self-contained interactive HTML report (the template ``assets/report.html``)
- ``memory``: a ``Memory`` (``analysis.memory``) as the terminal shows it and as
  ``memory.csv``
- ``outputs``: the files a run writes into its output directory, each listed once
- ``page``: the report page's data as records, each call site named by its id
- ``provenance``: ``provenance.json`` (kernel → blocks → ops → layers) and ``query --code``'s
  text
- ``safe_text``: names as text in every output but the HTML report (which escapes its
  own)
- ``steps``: an LLM's prefill and decode steps side by side (``steps.csv``, the terminal's
  lines)
- ``sweep``: a ``Sweep`` as ``sweep.csv``, ``fits.csv``, ``sweep.svg`` and a terminal table
- ``table``: plain-text tables for terminals
- ``verification_csv``: ``verification.csv``: each layer's verdict and its sites'
"""

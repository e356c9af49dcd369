"""Relay-era artifacts (TVM <= 0.19), read offline without Relay: printed Relay IR,
debug-executor / profiler-VM reports, AutoTVM task listings and tuning logs.

Modules:

- ``autotvm``: AutoTVM task listings and tuning logs (JSON lines), as pasted
- ``cli``: ``relaytrace legacy``
- ``common``: shared pieces of the legacy parsers
- ``match``: match Relay-era report rows, AutoTVM tasks and log records to Relay ops
- ``relay_ir``: printed Relay IR -> ops with shapes and attributes
- ``reports``: profiler reports of the Relay era, as printed and pasted
- ``summary``: answers from matched legacy artifacts
"""

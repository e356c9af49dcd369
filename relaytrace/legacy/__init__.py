"""Relay-era artifacts (TVM <= 0.19), read offline without Relay: printed Relay IR,
debug-executor / profiler-VM reports, AutoTVM task listings and tuning logs."""

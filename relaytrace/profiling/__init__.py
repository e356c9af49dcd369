"""Running a build and timing it (needs TVM): ``vm`` (the per-call profiler on the
Relax VM, local or over RPC), ``remote`` (RPC devices, every remote object freed
within a time limit), ``tasks`` (MetaSchedule tuning tasks per layer, tuning)."""

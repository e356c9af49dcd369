"""What the lineage and the profile say together, as figures renderers only read:
``attribution`` (time per layer, module, op type; shares; edges between layers),
``report`` (one precomputed ``Report`` per output), ``diff`` (two builds per layer by
stable id), ``comparison`` and ``layer_outputs`` (each layer's values against the
framework's: needs TVM's VM)."""

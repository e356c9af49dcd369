"""The data layer: lineages, origins, pass journals, verification, profiles and op
tables as plain frozen records with schema-checked JSON. Nothing here imports TVM,
so a saved lineage and profile are loaded, queried, verified, attributed and drawn
on any machine."""

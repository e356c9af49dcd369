"""Lineage files as earlier versions of relaytrace wrote them, made from a current one:
what the schema migrations are tested against."""

from __future__ import annotations


def flat_v2(data: dict) -> dict:
    """A ``relaytrace.lineage/3`` file's JSON as ``/2`` wrote it: every field of
    ``build`` and ``journal`` at the top level, under its /2 name (``build.accumulate``,
    new in /3, ``build.work`` and ``build.policies``, new in /4, and ``build.memory``, new
    in /5, ``build.params``, ``build.kv_cache`` and ``build.offloads``, added within /5,
    left out: a /2 file says none of them; ``build.options``, new in /6, as the one
    string ``pipeline`` it was)."""
    from relaytrace.model.build_facts import BuildOptions
    from relaytrace.model.codec import decode

    names = {"history_by_origin": "history", "eliminated_by": "eliminated"}
    flat = {k: v for k, v in data.items() if k not in ("build", "journal")}
    flat.update(
        {
            k: v
            for k, v in data["build"].items()
            if k not in ("accumulate", "work", "policies", "memory", "params", "kv_cache", "offloads", "options")
        }
    )
    flat["pipeline"] = v5_label(decode(BuildOptions, data["build"]["options"], "options"))
    flat.update({names.get(k, k): v for k, v in data["journal"].items()})
    return {**flat, "schema": "relaytrace.lineage/2"}


def v5_label(options) -> str:
    """``BuildOptions`` as the one string ``relaytrace.build`` wrote before /6."""
    label = f"{options.pipeline}+tuned({options.database})" if options.database else options.pipeline
    if options.convert_layout:
        label += f"+convert_layout({', '.join(f'{k}={list(v)}' for k, v in options.convert_layout.items())})"
    if options.mixed_precision:
        label += f"+mixed_precision(float16, accumulate {options.mixed_precision})"
    return label + ("+fold_batch_norm" if options.fold_batch_norm else "")

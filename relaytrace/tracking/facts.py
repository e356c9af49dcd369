"""How TVM's passes rewrite Relax IR: the facts the tracker and verification's truth
both rely on, in one place, so that a verdict that rests on one of them can say so
(``model.verification.Member.evidence``).

Each is a pure function of what the IR shows; neither side keeps its own copy.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from typing import TypeVar

from ..model.ops import is_data_movement

K = TypeVar("K", bound=Hashable)

# The names verdicts give these facts when they rest on them
LAYOUT_REUSE = "layout-reuse"
LOWERED_PART = "lowered-part"
FOLDED_NORM = "folded-norm"
NORM, CONV = "relax.nn.batch_norm", "relax.nn.conv2d"


def folds_a_norm(callee: str, first_callee: str | None, weight_from_constants: bool, rest_from_constants: bool) -> bool:
    """An add of constants alone (``rest_from_constants``) to a conv2d whose weight is
    computed from constants alone (``weight_from_constants``; a model's conv has a
    constant weight) is what ``FoldBatchnormToConv2D`` writes in place of a batch norm
    after a conv: the norm's scale folded into the weight, its shift into this add. The
    add computes the norm."""
    return callee == "relax.add" and first_callee == CONV and weight_from_constants and rest_from_constants


def reused_for_layout(old_moves_data: bool, new_callee: str) -> bool:
    """A var that bound an op and now calls a layout transform was reused for the
    transform (AlterOpImpl writes the op's new implementation to a new var and the
    transform after it into the old one): the var no longer computes the op. A var
    that moved data before and moves data now is the same transform."""
    return is_data_movement(new_callee) and not old_moves_data


def lowered_parts(
    candidates: Sequence[K], consumers: Mapping[K, Collection[K]], is_whole: Callable[[K], bool]
) -> dict[K, K]:
    """Which new PrimFunc calls are parts of an op a pass lowered into several
    (``LegalizeOps(customize_legalize_map=...)``): a candidate (a new PrimFunc call
    that does not only move data, in binding order) whose only consumer is a whole
    (the op lowered in place, ``is_whole``) or another part is a part of that whole.
    Later candidates first, so a chain of parts reaches its whole. Returns
    candidate -> whole."""
    parts: dict[K, K] = {}
    for candidate in reversed(candidates):
        users = set(consumers.get(candidate, ()))
        if len(users) != 1:
            continue
        (user,) = users
        whole = user if is_whole(user) else parts.get(user)
        if whole is not None:
            parts[candidate] = whole
    return parts

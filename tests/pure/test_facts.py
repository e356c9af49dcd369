"""The facts about TVM's passes that the tracker and verification's truth share
(``tracking.facts``), pure: no TVM."""

from relaytrace.tracking.facts import lowered_parts, reused_for_layout


def test_a_var_that_bound_an_op_and_now_moves_data_was_reused_for_a_layout_transform():
    assert reused_for_layout(False, "layout_transform")
    assert reused_for_layout(False, "relax.permute_dims")
    assert not reused_for_layout(True, "layout_transform")  # a transform before and after: the same one
    assert not reused_for_layout(False, "conv2d_NCHWc")  # a new implementation computes the op still


def test_parts_reach_their_whole_through_a_chain_and_only_through_one_consumer():
    # a -> b -> W (lowered in place); c feeds W and d; e feeds nothing
    consumers = {"a": ["b"], "b": ["W"], "c": ["W", "d"], "d": ["W"], "e": []}
    parts = lowered_parts(["a", "b", "c", "d", "e"], consumers, {"W"}.__contains__)
    assert parts == {"a": "W", "b": "W", "d": "W"}


def test_a_candidate_before_its_consumer_in_the_list_is_not_reached_backwards():
    # candidates are in binding order: a consumer is bound after its producer
    parts = lowered_parts(["b", "a"], {"a": ["b"], "b": ["W"]}, {"W"}.__contains__)
    assert parts == {"b": "W"}

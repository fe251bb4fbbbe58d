"""groups_to_datums against hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from tinker_atropos.losses import loss_named
from tinker_atropos.trainer.batches import groups_to_datums, with_sampler_logprobs

P = -100  # prompt mask


def _group(tokens, masks, scores, logprobs=None, **extra):
    return {
        "tokens": tokens,
        "masks": masks,
        "scores": scores,
        "inference_logprobs": logprobs,
        "advantages": None,
        "overrides": None,
        "group_overrides": None,
        **extra,
    }


def _arr(datum, key):
    return datum.loss_fn_inputs[key].to_numpy().tolist()


def test_shift_alignment_and_group_mean_advantage():
    # prompt = [5, 6], completions [7, 8] and [9]
    group = _group(
        tokens=[[5, 6, 7, 8], [5, 6, 9]],
        masks=[[P, P, 7, 8], [P, P, 9]],
        scores=[1.0, 0.0],
        logprobs=[[1.0, 1.0, -0.5, -0.25], [1.0, 1.0, -2.0]],
    )
    out = groups_to_datums([group])
    assert len(out.datums) == 2
    d0, d1 = out.datums
    assert d0.model_input.to_ints() == [5, 6, 7]
    assert _arr(d0, "target_tokens") == [6, 7, 8]
    # logprob of target k is inference_logprobs[k + 1]; prompt targets get 0
    assert _arr(d0, "logprobs") == [0.0, -0.5, -0.25]
    # mean score 0.5: advantages +0.5 / -0.5 on completion targets only
    assert _arr(d0, "advantages") == [0.0, 0.5, 0.5]
    assert d1.model_input.to_ints() == [5, 6]
    assert _arr(d1, "target_tokens") == [6, 9]
    assert _arr(d1, "logprobs") == [0.0, -2.0]
    assert _arr(d1, "advantages") == [0.0, -0.5]
    assert out.completion_masks[0].tolist() == [False, True, True]
    assert out.completion_tokens == 3
    assert out.tokens == 7
    assert out.num_sequences == 2
    # batch statistics: float64 (numpy) over a few values; approx's default rel 1e-6 >> their rounding
    assert out.reward_mean == pytest.approx(0.5)
    assert out.reward_std == pytest.approx(0.5)
    assert out.advantage_mean == pytest.approx(0.0)
    assert out.advantage_std == pytest.approx(0.5)
    assert out.missing_logprobs == []
    assert out.percent_correct is None


def test_zero_advantage_group_is_skipped_but_counted_in_rewards():
    flat = _group([[1, 2, 3], [1, 2, 4]], [[P, P, 3], [P, P, 4]], [0.7, 0.7], [[1.0, 1.0, -1.0], [1.0, 1.0, -1.0]])
    live = _group([[1, 2, 3], [1, 2, 4]], [[P, P, 3], [P, P, 4]], [1.0, 0.0], [[1.0, 1.0, -1.0], [1.0, 1.0, -1.0]])
    out = groups_to_datums([flat, live])
    assert out.skipped_groups == 1
    assert len(out.datums) == 2
    assert out.num_sequences == 4
    assert out.reward_mean == pytest.approx((0.7 + 0.7 + 1.0 + 0.0) / 4)
    assert [_arr(d, "advantages") for d in out.datums] == [[0.0, 0.5], [0.0, -0.5]]


def test_everything_skipped_gives_no_datums():
    out = groups_to_datums([_group([[1, 2, 3]] * 3, [[P, P, 3]] * 3, [1.0, 1.0, 1.0])])
    assert out.datums == [] and out.skipped_groups == 1
    assert out.reward_mean == 1.0 and out.advantage_mean == 0.0


def test_set_advantage_to_zero_override_per_item_and_group():
    lps = [[1.0, -1.0, -1.0]] * 3
    group = _group(
        [[1, 2, 3], [1, 4, 5], [1, 6, 7]],
        [[P, 2, 3], [P, 4, 5], [P, 6, 7]],
        [3.0, 0.0, 0.0],
        lps,
        overrides=[{}, {"set_advantage_to_zero": True}, {"temperature": 0.7}],
    )
    out = groups_to_datums([group])
    # mean 1.0 -> advantages 2, -1, -1; the second is zeroed by its override
    assert [_arr(d, "advantages") for d in out.datums] == [[2.0, 2.0], [0.0, 0.0], [-1.0, -1.0]]

    zeroed = dict(group, group_overrides={"set_advantage_to_zero": True})
    out = groups_to_datums([zeroed])
    assert out.datums == [] and out.skipped_groups == 1


def test_environment_token_advantages_replace_score_baseline():
    group = _group(
        tokens=[[1, 2, 3, 4], [1, 2, 5, 6]],
        masks=[[P, P, 3, 4], [P, P, 5, 6]],
        scores=[1.0, 1.0],  # equal scores: without the env's advantages this group is skipped
        logprobs=[[1.0, 1.0, -0.1, -0.2], [1.0, 1.0, -0.3, -0.4]],
        advantages=[[9.0, 9.0, 0.25, -0.75], [9.0, 9.0, 1.5, 0.0]],
    )
    out = groups_to_datums([group])
    assert out.skipped_groups == 0
    # shifted by one, and prompt targets are zeroed even when the env put values there
    assert [_arr(d, "advantages") for d in out.datums] == [[0.0, 0.25, -0.75], [0.0, 1.5, 0.0]]
    assert out.advantage_mean == pytest.approx(((0.25 - 0.75) / 2 + 1.5 / 2) / 2)


def test_multi_turn_mask_keeps_only_completion_targets():
    # completion, then a user turn (masked), then another completion
    group = _group(
        tokens=[[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 7]],
        masks=[[P, 2, 3, P, P, 6], [P, 2, 3, P, P, 7]],
        scores=[2.0, 0.0],
        logprobs=[[1.0, -1.0, -2.0, 1.0, 1.0, -3.0], [1.0, -1.0, -2.0, 1.0, 1.0, -4.0]],
    )
    d0 = groups_to_datums([group]).datums[0]
    assert _arr(d0, "advantages") == [1.0, 1.0, 0.0, 0.0, 1.0]
    assert _arr(d0, "logprobs") == [-1.0, -2.0, 0.0, 0.0, -3.0]


def test_ragged_lengths_across_groups():
    g1 = _group(
        [[1, 2, 3], [1, 2, 3, 4, 5, 6, 7]],
        [[P, P, 3], [P, P, 3, 4, 5, 6, 7]],
        [0.0, 1.0],
        [[1.0, 1.0, -1.0], [1.0, 1.0, -1.0, -1.0, -1.0, -1.0, -1.0]],
    )
    g2 = _group(
        [[8] * 10, [8] * 4], [[P] * 9 + [8], [P, P, 8, 8]], [0.0, 2.0], [[1.0] * 9 + [-0.5], [1.0, 1.0, -0.5, -0.5]]
    )
    out = groups_to_datums([g1, g2])
    assert [d.model_input.length for d in out.datums] == [2, 6, 9, 3]
    assert [len(_arr(d, "advantages")) for d in out.datums] == [2, 6, 9, 3]
    assert _arr(out.datums[2], "advantages") == [0.0] * 8 + [-1.0]
    assert out.tokens == 3 + 7 + 10 + 4


def test_missing_inference_logprobs_are_reported_and_fillable():
    group = _group([[1, 2, 3], [1, 2, 4]], [[P, P, 3], [P, P, 4]], [1.0, 0.0], logprobs=None)
    out = groups_to_datums([group])
    assert out.missing_logprobs == [0, 1]
    filled = with_sampler_logprobs(out.datums[1], np.array([0.0, -0.75]))
    assert _arr(filled, "logprobs") == [0.0, -0.75]
    assert _arr(filled, "advantages") == _arr(out.datums[1], "advantages")
    assert filled.model_input.to_ints() == [1, 2]
    # one sequence without them (an empty list: a demonstration): only that one is missing
    group = _group([[1, 2, 3], [1, 2, 4]], [[P, P, 3], [P, P, 4]], [1.0, 0.0], logprobs=[[], [1.0, 1.0, -0.5]])
    out = groups_to_datums([group])
    assert out.missing_logprobs == [0] and _arr(out.datums[1], "logprobs") == [0.0, -0.5]


def test_malformed_group_is_dropped_not_fatal():
    bad = _group([[1, 2, 3], [1, 2]], [[P, P, 3], [P, P, 4]], [1.0, 0.0])
    short_scores = _group([[1, 2, 3], [1, 2, 4]], [[P, P, 3], [P, P, 4]], [1.0])
    good = _group([[1, 2, 3], [1, 2, 4]], [[P, P, 3], [P, P, 4]], [1.0, 0.0], [[1.0, 1.0, -1.0], [1.0, 1.0, -1.0]])
    out = groups_to_datums([bad, short_scores, good])
    assert out.invalid_groups == 2
    assert len(out.datums) == 2
    assert out.num_sequences == 2


def test_percent_correct_from_overrides():
    group = _group(
        [[1, 2, 3]] * 4,
        [[P, P, 3]] * 4,
        [1.0, 0.0, 0.0, 1.0],
        [[1.0, 1.0, -1.0]] * 4,
        overrides=[{"correct": True}, {"correct": False}, {}, {"correct": True}],
    )
    assert groups_to_datums([group]).percent_correct == pytest.approx(2 / 3)


def test_single_token_sequence_has_no_target_and_is_dropped():
    group = _group(
        [[1], [1, 2, 3], [1, 2, 4]],
        [[P], [P, P, 3], [P, P, 4]],
        [0.0, 3.0, 0.0],
        [[1.0], [1.0, 1.0, -1.0], [1.0, 1.0, -1.0]],
    )
    out = groups_to_datums([group])
    assert len(out.datums) == 2
    assert [_arr(d, "advantages") for d in out.datums] == [[0.0, 2.0], [0.0, -1.0]]


def test_loss_inputs_per_loss_fn():
    group = _group([[1, 2, 3], [1, 2, 4]], [[P, P, 3], [P, P, 4]], [1.0, 0.0], [[1.0, 1.0, -1.0], [1.0, 1.0, -1.0]])
    datums = groups_to_datums([group]).datums
    assert loss_named("importance_sampling").datums(datums) == datums
    assert set(datums[0].loss_fn_inputs) == {"target_tokens", "logprobs", "advantages"}
    [ce, _] = loss_named("cross_entropy").datums(datums)
    assert set(ce.loss_fn_inputs) == {"target_tokens", "weights"}
    assert _arr(ce, "weights") == [0.0, 0.5]
    assert ce.model_input.to_ints() == [1, 2]


def test_groups_and_distinct_replies_are_counted() -> None:
    """Two groups of three: one with every reply the same (no signal), one with two distinct."""
    same = {"tokens": [[1, 2, 3]] * 3, "masks": [[-100, 2, 3]] * 3, "scores": [0.5, 0.5, 0.5]}
    mixed = {
        "tokens": [[1, 2, 3], [1, 2, 3], [1, 4, 5]],
        "masks": [[-100, 2, 3], [-100, 2, 3], [-100, 4, 5]],
        "scores": [1.0, 1.0, 0.0],
    }
    conv = groups_to_datums([same, mixed])
    assert conv.groups == 2 and conv.skipped_groups == 1
    assert conv.distinct_reply_share == pytest.approx((1 / 3 + 2 / 3) / 2)


def test_token_entropy_is_the_mean_negative_sampler_logprob_of_every_completion_token() -> None:
    """All-equal groups count too (a collapse shows there first); prompt placeholders and groups
    sent without sampler logprobs do not."""
    same = _group([[1, 2, 3]] * 2, [[P, 2, 3]] * 2, [0.5, 0.5], [[1.0, -0.5, -0.25]] * 2)
    mixed = _group([[1, 2], [1, 4]], [[P, 2], [P, 4]], [1.0, 0.0], [[1.0, -2.0], [1.0, -1.0]])
    unsampled = _group([[1, 2], [1, 4]], [[P, 2], [P, 4]], [1.0, 0.0])
    conv = groups_to_datums([same, mixed, unsampled])
    assert conv.skipped_groups == 1
    # a mean of a few exact binary fractions (float32 logprobs): approx's default rel 1e-6 >> its rounding
    assert conv.token_entropy == pytest.approx((0.75 * 2 + 2.0 + 1.0) / 6)
    assert groups_to_datums([unsampled]).token_entropy is None


def test_group_std_scaling_divides_each_group_by_its_own_spread():
    """Two groups with the same ranking but spreads 100x apart get the same advantages."""
    wide = _group([[1, 2, 3]] * 3, [[P, P, 3]] * 3, [1.0, 0.0, 0.5], [[1.0, 1.0, -1.0]] * 3)
    narrow = _group([[1, 2, 3]] * 3, [[P, P, 3]] * 3, [0.31, 0.30, 0.305], [[1.0, 1.0, -1.0]] * 3)
    plain = groups_to_datums([wide, narrow])
    scaled = groups_to_datums([wide, narrow], "group")
    plain_adv = [_arr(d, "advantages")[-1] for d in plain.datums]
    scaled_adv = [_arr(d, "advantages")[-1] for d in scaled.datums]
    # advantages are stored as float32: half an ulp of 0.5 is 3e-8, of 0.005 below that
    assert plain_adv == pytest.approx([0.5, -0.5, 0.0, 0.005, -0.005, 0.0], abs=1e-6)
    # std (ddof 1) of each group: 0.5 and 0.005; TRL's 1e-4 keeps the narrow one bounded
    # float32 storage after a float64 division: rel 2^-24 (6e-8); 1e-6 leaves room for the std's own sum
    assert scaled_adv[:3] == pytest.approx([0.5 / 0.5001, -0.5 / 0.5001, 0.0], rel=1e-6)
    assert scaled_adv[3:] == pytest.approx([0.005 / 0.0051, -0.005 / 0.0051, 0.0], rel=1e-6)
    # an all-equal group stays without signal
    flat = _group([[1, 2, 3]] * 2, [[P, P, 3]] * 2, [0.7, 0.7], [[1.0, 1.0, -1.0]] * 2)
    assert groups_to_datums([flat], "group").skipped_groups == 1

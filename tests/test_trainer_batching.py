"""Collation, reward placement and token-budget micro-batching."""

import pytest
import torch

from ragen.agent.trajectory import Trajectory
from ragen.batching import (
    collate,
    micro_batches,
    padding_fraction,
    prompt_keys,
    token_budget_micro_batches,
)
from ragen.trainer.credit import baseline_groups, place_rewards


def _traj(ids, mask, ends, turn_rewards, episode_reward=0.0):
    return Trajectory(
        input_ids=ids,
        response_mask=mask,
        gen_logprobs=[-0.5 * m for m in mask],
        turn_ends=ends,
        turn_rewards=turn_rewards,
        episode_reward=episode_reward,
    )


def test_collate_right_pads_and_aligns_masks():
    a = _traj([1, 2, 3, 4, 5], [0, 0, 1, 1, 0], [3], [1.0])
    b = _traj([7, 8, 9], [0, 1, 1], [2], [0.5])
    batch = collate([a, b], pad_id=0)
    assert batch.input_ids.tolist() == [[1, 2, 3, 4, 5], [7, 8, 9, 0, 0]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    assert batch.response_mask.tolist() == [[0, 0, 1, 1, 0], [0, 1, 1, 0, 0]]
    assert batch.turn_end_mask.tolist() == [[0, 0, 0, 1, 0], [0, 0, 1, 0, 0]]
    assert batch.gen_log_prob[0].tolist() == [0, 0, -0.5, -0.5, 0]
    assert batch.lengths.tolist() == [5, 3]


def test_place_rewards_trajectory_vs_turn():
    t = _traj([1, 2, 3, 4, 5, 6, 7], [0, 1, 1, 0, 1, 1, 0], [2, 5], [0.25, -0.1], 0.15)
    scores = torch.tensor([2.0])
    traj_r = place_rewards([t], scores, (1, 7), "trajectory")
    turn_r = place_rewards([t], scores, (1, 7), "turn")
    assert traj_r.tolist() == [[0, 0, 0, 0, 0, 2.0, 0]]
    assert torch.allclose(turn_r, torch.tensor([[0, 0, 0.25, 0, 0, -0.1, 0]]))


def test_micro_batches_respect_budget_and_cover_all():
    lengths = [10, 50, 30, 45, 12, 11, 200]
    batches = token_budget_micro_batches(lengths, token_budget=100)
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(len(lengths)))
    for b in batches:
        cost = max(lengths[i] for i in b) * len(b)
        assert cost <= 100 or len(b) == 1  # an over-long sample gets its own batch
    # sorting by length keeps padding small
    assert padding_fraction(lengths, batches) < 0.25


def test_min_fill_splits_two_length_modes_within_the_budget():
    # SFT's move samples beside its auxiliary replies: one pack pads the short ones
    lengths = [170] * 4 + [110] * 4
    assert len(token_budget_micro_batches(lengths, token_budget=16384)) == 1
    split = token_budget_micro_batches(lengths, token_budget=16384, min_fill=0.75)
    assert [sorted(lengths[i] for i in b) for b in split] == [[170] * 4, [110] * 4]
    assert padding_fraction(lengths, split) == 0.0
    # close lengths stay together; the budget still splits
    assert len(token_budget_micro_batches([100, 95, 90], 16384, min_fill=0.75)) == 1
    assert len(token_budget_micro_batches([100, 95, 90], 200, min_fill=0.75)) == 2
    with pytest.raises(ValueError, match="min_fill"):
        token_budget_micro_batches(lengths, 100, min_fill=1.0)


def test_padding_fraction_exact():
    assert padding_fraction([4, 2], [[0, 1]]) == 1 - 6 / 8
    assert padding_fraction([4, 2], [[0], [1]]) == 0.0


def _turn_sample(group_id, turn_index, to_go):
    t = _traj([1, 2, 3], [0, 1, 1], [2], [0.0], episode_reward=5.0)
    t.group_id, t.turn_index, t.reward_from_turn = group_id, turn_index, to_go
    return t


def test_baseline_groups_full_history_by_initial_state():
    samples = [_traj([1, 2], [0, 1], [1], [0.0]) for _ in range(4)]
    for t, g in zip(samples, [3, 3, 7, 3]):
        t.group_id = g
    assert baseline_groups(samples).tolist() == [0, 0, 1, 0]
    assert [t.reward_to_go for t in samples] == [0.0] * 4  # = episode_reward


def test_baseline_groups_windowed_by_initial_state_and_turn():
    samples = [_turn_sample(0, 0, 2.0), _turn_sample(0, 1, 1.5), _turn_sample(0, 0, -1.0)]
    samples += [_turn_sample(1, 0, 0.0)]
    assert baseline_groups(samples).tolist() == [0, 1, 0, 2]
    assert [t.reward_to_go for t in samples] == [2.0, 1.5, -1.0, 0.0]


def test_baseline_groups_windowed_by_observed_state():
    from ragen.agent.trajectory import TurnRecord

    def turn(obs):
        return TurnRecord(obs, "", "", [], [], 0.0, True, 0.0, False)

    # two episodes of one room: A -> B -> A and A -> C; and another room that also shows A
    ep1, ep2, other = [turn("A"), turn("B"), turn("A")], [turn("A"), turn("C")], [turn("A")]
    samples = [_turn_sample(0, k, 0.0) for k in range(3)] + [
        _turn_sample(0, k, 0.0) for k in range(2)
    ]
    samples.append(_turn_sample(1, 0, 0.0))
    for t, turns in zip(samples, [ep1] * 3 + [ep2] * 2 + [other]):
        t.turns = turns
    # every visit of A in room 0 shares one baseline; B and C are alone; room 1 is apart
    assert baseline_groups(samples, "state").tolist() == [0, 1, 0, 0, 2, 3]
    assert baseline_groups(samples, "turn").tolist() == [0, 1, 2, 0, 1, 3]
    with pytest.raises(ValueError, match="turn or state"):
        baseline_groups(samples, "episode")


def test_training_batch_rows_cut_to_longest_and_micro_batches_cover_rows():
    a = _traj([1, 2, 3, 4, 5], [0, 0, 1, 1, 0], [3], [1.0])
    b = _traj([7, 8, 9], [0, 1, 1], [2], [0.5])
    c = _traj([4, 4], [0, 1], [1], [0.0])
    batch = collate([a, b, c], pad_id=0)
    batch.index = torch.tensor([0, 0, 1])
    sub = batch.rows([2, 1])
    assert sub.input_ids.tolist() == [[4, 4, 0], [7, 8, 9]]  # cut to the longest row (3)
    assert sub.index.tolist() == [1, 0] and sub.lengths.tolist() == [2, 3]
    assert sub.old_log_prob is None  # unset phases stay unset
    packs = micro_batches(batch, [0, 1, 2], token_budget=6)
    assert sorted(i for ids, _ in packs for i in ids) == [0, 1, 2]
    lengths = [5, 3, 2]
    for ids, mb in packs:
        assert mb.size == len(ids)
        assert mb.input_ids.shape[1] == max(lengths[i] for i in ids)
        assert mb.input_ids.shape[1] * mb.size <= 6 or mb.size == 1


def test_keyed_packing_keeps_each_prompts_rows_together_within_the_budget():
    lengths = [10, 9, 10, 8, 10, 9, 7, 10]
    keys = ["a", "b", "a", "c", "b", "a", "c", "c"]
    batches = token_budget_micro_batches(lengths, token_budget=30, keys=keys)
    assert sorted(i for b in batches for i in b) == list(range(8))
    flat = [keys[i] for b in batches for i in b]
    # each key's rows are one run in the packing order (groups never interleave)
    runs = [k for j, k in enumerate(flat) if j == 0 or flat[j - 1] != k]
    assert sorted(runs) == ["a", "b", "c"]
    for b in batches:
        assert max(lengths[i] for i in b) * len(b) <= 30
    # no keys: the length order of before
    assert token_budget_micro_batches(lengths, 30) == token_budget_micro_batches(
        lengths, 30, keys=None
    )


def test_rows_that_share_a_prompt_share_a_micro_batch():
    # rows 0, 2, 4 share the prompt [1, 2]; 1 and 3 share [5]; shuffled in
    a = _traj([1, 2, 3, 0], [0, 0, 1, 0], [3], [1.0])
    b = _traj([5, 3, 3], [0, 1, 1], [2], [0.5])
    c = _traj([1, 2, 4], [0, 0, 1], [2], [0.0])
    d = _traj([5, 4], [0, 1], [1], [0.0])
    batch = collate([a, b, c, d, a], pad_id=0)
    keys = prompt_keys(batch, range(5))
    assert keys == [(1, 2), (5,), (1, 2), (5,), (1, 2)]
    packs = micro_batches(batch, [3, 0, 1, 4, 2], token_budget=12, by_prompt=True)
    assert [sorted(ids) for ids, _ in packs] == [[0, 2, 4], [1, 3]]
    # the same rows by length alone mix the prompts
    plain = micro_batches(batch, [3, 0, 1, 4, 2], token_budget=12)
    assert [sorted(ids) for ids, _ in plain] != [[0, 2, 4], [1, 3]]


def test_discounted_reward_to_go_of_windowed_turns():
    from ragen.agent.trajectory import TurnRecord

    def turn(reward):
        return TurnRecord("obs", "", "", [], [], reward, True, reward, False)

    turns = [turn(0.5), turn(-0.25), turn(1.0)]  # one episode's turn rewards
    samples = [_turn_sample(0, k, sum(t.reward for t in turns[k:])) for k in range(3)]
    for t in samples:
        t.turns = turns
    # gamma 1: the plain reward-to-go; gamma 0: the turn's own reward
    assert [t.discounted_reward_to_go(1.0) for t in samples] == [1.25, 0.75, 1.0]
    assert [t.discounted_reward_to_go(0.0) for t in samples] == [0.5, -0.25, 1.0]
    # gamma 0.5: r_k + 0.5 r_{k+1} + 0.25 r_{k+2}
    assert samples[0].discounted_reward_to_go(0.5) == pytest.approx(0.5 - 0.125 + 0.25)
    # a full-history sample keeps its episode reward whatever gamma is
    full = _traj([1, 2], [0, 1], [1], [0.0], episode_reward=3.0)
    assert full.discounted_reward_to_go(0.0) == 3.0


def test_window_gamma_is_a_checked_discount():
    from ragen.errors import ConfigError
    from ragen.trainer.config import load_config

    assert load_config(["env=sokoban"]).algo.window_gamma == 1.0
    with pytest.raises(ConfigError, match="algo.window_gamma"):
        load_config(["env=sokoban", "algo.window_gamma=1.5"])

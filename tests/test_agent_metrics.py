"""rollout_metrics on hand-made trajectories (values checked by hand)."""

from __future__ import annotations

import pytest

from ragen.agent.metrics import episodes_of, rollout_metrics
from ragen.agent.trajectory import Trajectory, TurnRecord


def _turn(env_reward, reward, format_ok=True):
    return TurnRecord("obs", "resp", "", [], [], env_reward, format_ok, reward, False)


def _traj(
    group,
    episode,
    reward,
    success,
    turns=2,
    actions=4,
    valid=3,
    effective=2,
    fmt_errors=0,
    end_reason="terminated",
    tokens=(5, 5),
    turn_index=0,
):
    ids = [1] * (3 + sum(tokens))
    mask = [0, 0, 0] + [1] * sum(tokens)
    return Trajectory(
        input_ids=ids, response_mask=mask, gen_logprobs=[0.0] * len(ids),
        turn_ends=[], turn_rewards=[], group_id=group, episode_id=episode,
        episode_reward=reward, success=success, num_turns=turns, num_actions=actions,
        num_valid_actions=valid, num_effective_actions=effective,
        num_format_errors=fmt_errors, end_reason=end_reason, turn_index=turn_index,
        turns=[_turn(reward - 0.1 * fmt_errors, reward)] + [_turn(0.0, 0.0)] * (turns - 1),
    )  # fmt: skip


def test_metrics_by_hand():
    trajs = [
        _traj(0, 0, 1.0, True),
        _traj(0, 1, 0.0, False, fmt_errors=1, end_reason="context_overflow"),
        _traj(
            1, 2, -1.0, False, turns=4, actions=2, valid=2, effective=2, end_reason="env_truncated"
        ),
        _traj(1, 3, -1.0, False, turns=4, actions=2, valid=2, effective=2, tokens=(1, 1)),
    ]
    m = rollout_metrics(trajs, group_size=2)
    assert m["episodes"] == 4
    assert m["success_rate"] == 0.25
    assert m["reward_mean"] == pytest.approx(-0.25)
    assert m["reward_std"] == pytest.approx((((1.25**2) + 0.25**2 + 2 * 0.75**2) / 4) ** 0.5)
    assert m["pass_at_k"] == 0.5 and m["group_size"] == 2
    assert m["group_reward_std"] == pytest.approx((0.5 + 0.0) / 2)
    assert m["valid_action_rate"] == pytest.approx(10 / 12)
    assert m["effective_action_rate"] == pytest.approx(8 / 12)
    assert m["mean_turns"] == 3 and m["mean_actions"] == 3
    assert m["format_error_rate"] == pytest.approx(1 / 12)
    assert m["truncation_rate"] == 0.25 and m["env_truncation_rate"] == 0.25
    assert m["response_length"] == pytest.approx((10 + 10 + 10 + 2) / 12)
    assert m["env_reward_mean"] == pytest.approx((1.0 - 0.1 - 1.0 - 1.0) / 4)
    assert rollout_metrics(trajs)["group_size"] == 2  # inferred from the groups


def test_windowed_samples_count_once_per_episode():
    per_turn = [_traj(0, 7, 1.0, True, tokens=(4,), turn_index=k) for k in range(3)]
    m = rollout_metrics(per_turn)
    assert m["episodes"] == 1 and m["success_rate"] == 1.0
    assert m["response_length"] == pytest.approx(12 / 2)  # 3 samples x 4 tokens over 2 turns
    assert len(episodes_of(per_turn)) == 1


def test_empty_and_text_only():
    assert rollout_metrics([]) == {"episodes": 0.0}
    text_only = _traj(0, 0, 1.0, True)
    text_only.input_ids, text_only.response_mask, text_only.gen_logprobs = [], [], []
    m = rollout_metrics([text_only])
    assert "response_length" not in m and m["success_rate"] == 1.0


def test_group_reward_std_is_the_filters_statistic_over_episodes():
    """Windowed episodes (one sample per turn): the metric counts each episode once, and
    equals the mean of the std the StarPO-S filter ranks groups by."""
    from ragen.algo import filter_groups

    trajs = [
        *[_traj(0, 0, 1.0, True, turns=4, tokens=(2,), turn_index=k) for k in range(4)],
        _traj(0, 1, 0.0, False, turns=1, tokens=(2,)),
        *[_traj(1, 2, 1.0, True, turns=2, tokens=(2,), turn_index=k) for k in range(2)],
        *[_traj(1, 3, -1.0, False, turns=2, tokens=(2,), turn_index=k) for k in range(2)],
    ]
    m = rollout_metrics(trajs)
    assert m["group_reward_std"] == pytest.approx((0.5 + 1.0) / 2)  # population std
    _, filter_metrics = filter_groups(
        [t.episode_reward for t in trajs],
        [t.group_id for t in trajs],
        "top_p",
        1.0,
        episode_ids=[t.episode_id for t in trajs],
    )
    assert filter_metrics["std_mean_before"] == pytest.approx(m["group_reward_std"])

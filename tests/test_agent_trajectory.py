"""``Trajectory.end_reason`` and ``continues_after_end`` (when a critic bootstraps)."""

from __future__ import annotations

import pytest

from ragen.agent.trajectory import END_REASONS, Trajectory


def _sample(end_reason: str, **kw) -> Trajectory:
    return Trajectory([], [], [], [], [], end_reason=end_reason, num_turns=3, **kw)


# reason -> (continues with budget_is_terminal=False, with budget_is_terminal=True)
TRUTH_TABLE = {
    "terminated": (False, False),
    "turn_limit": (True, False),
    "action_budget": (True, False),
    "context_overflow": (True, True),
    "env_truncated": (True, True),
}


def test_the_truth_table_covers_every_end_reason():
    assert set(TRUTH_TABLE) == set(END_REASONS)


@pytest.mark.parametrize("reason", END_REASONS)
def test_continues_after_end_full_history(reason):
    t = _sample(reason)
    got = (t.continues_after_end(False), t.continues_after_end(True))
    assert got == TRUTH_TABLE[reason]


@pytest.mark.parametrize("reason", END_REASONS)
def test_windowed_samples_continue_only_at_the_last_turn(reason):
    samples = [_sample(reason, turn_index=k, reward_from_turn=1.0) for k in range(3)]
    for budget_is_terminal in (False, True):
        got = [s.continues_after_end(budget_is_terminal) for s in samples]
        assert got == [False, False, TRUTH_TABLE[reason][budget_is_terminal]]


def test_unknown_end_reason_is_rejected_naming_the_choices():
    with pytest.raises(ValueError, match="end_reason must be one of .*terminated"):
        _sample("timeout")
    assert Trajectory([], [], [], [], []).end_reason == "terminated"  # the default

"""Credit assignment's inputs, decided when the RL batch is prepared
(``ragen.trainer.rollout_phase.prepare_batch``): where a sample's rewards sit on its
tokens (:func:`place_rewards`), which samples share a baseline (:func:`baseline_groups`),
and which tokens the masked advantage recursion runs over (:data:`ADVANTAGE_TOKENS`).
The choices of the keys that select them (``algo.reward_placement``,
``algo.turn_baseline``, ``algo.advantage_tokens``) are the constants here.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ragen.agent.trajectory import Trajectory
from ragen.errors import ConfigError

TURN_BASELINES = ("turn", "state")


# which tokens take part in masked_gae's recursion (M_adv): the sampled ids, or the sampled
# ids plus the template tokens that close each assistant turn (e.g. ``<|im_end|>``)
ADVANTAGE_TOKENS = ("response", "response_and_turn_end")


def baseline_groups(
    trajectories: Sequence[Trajectory], turn_baseline: str = "turn"
) -> torch.Tensor:
    """``(B,)`` long: the group each sample's baseline comes from (GRPO-style estimators,
    ``norm_grouping=state``).

    A full-history sample is grouped with the other episodes from its initial state
    (``group_id``). A windowed sample (one turn, scored by its reward-to-go) is grouped,
    within its initial state's episodes, with

    * ``turn``: the same turn of the other episodes. Reward-to-go shrinks as an episode
      goes on, so turn 8's credit must not be measured against turn 0's. At turn 0 the
      group shares one state exactly; later, only the same start and age.
    * ``state``: every turn, of any of those episodes, that answered the same
      observation (GiGPO's anchor states, Feng et al. 2025): the moves made from one
      state are compared with each other, so a move's advantage is about the move. A
      state met only once is its own group (a zero advantage under GRPO/Dr.GRPO). Needs
      a fully observed env whose observation text is the state (the grids).
    """
    if turn_baseline not in TURN_BASELINES:
        raise ConfigError(f"unknown turn baseline {turn_baseline!r}: use turn or state")
    keys: dict[tuple[int, object], int] = {}
    ids = []
    for t in trajectories:
        if t.reward_from_turn is None:  # full history (or not windowed)
            key: tuple[int, object] = (t.group_id, None)
        elif turn_baseline == "state":
            key = (t.group_id, t.turns[t.turn_index].observation)
        else:
            key = (t.group_id, t.turn_index)
        ids.append(keys.setdefault(key, len(keys)))
    return torch.tensor(ids, dtype=torch.long)


REWARD_PLACEMENTS = ("trajectory", "turn")  # place_rewards(placement=...)


def place_rewards(
    trajectories: Sequence[Trajectory],
    scores: torch.Tensor,
    shape: tuple[int, int],
    placement: str,
) -> torch.Tensor:
    """Token-level rewards (B, T).

    ``trajectory``: the (possibly normalized) sample score ``scores[i]`` sits on the
    sample's last sampled token. ``turn``: each turn's reward sits on its turn-end token
    (the form TRICO's bi-level GAE expects).
    """
    rewards = torch.zeros(shape)
    for i, traj in enumerate(trajectories):
        if not traj.turn_ends:
            continue
        if placement == "trajectory":
            rewards[i, traj.turn_ends[-1]] = scores[i]
        elif placement == "turn":
            ends = torch.tensor(traj.turn_ends, dtype=torch.long)
            rewards[i, ends] = torch.tensor(
                traj.turn_rewards[: len(traj.turn_ends)], dtype=torch.float
            )
        else:
            raise ConfigError(f"unknown reward placement {placement!r}: use trajectory or turn")
    return rewards

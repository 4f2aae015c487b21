"""Turn trajectories into padded tensors and pack them into token-budget micro-batches.

All per-token tensors are aligned to token positions of the training sequence:
``x[:, t]`` describes token ``input_ids[:, t]``. A log-prob at ``t`` is log p(token t |
tokens < t), so position 0 (always part of the first prompt) carries no log-prob.
Sequences are RIGHT-padded, which lets a micro-batch slice ``[:, :max_len]``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ragen.agent.trajectory import Trajectory


def collate(trajectories: Sequence[Trajectory], pad_id: int) -> dict[str, torch.Tensor]:
    """Pad a list of trajectories into a batch.

    Returns (B = len(trajectories), T = longest sequence):
        input_ids      (B, T) long, right-padded with ``pad_id``
        attention_mask (B, T) long, 1 on real tokens
        response_mask  (B, T) float, 1 on sampled tokens
        turn_end_mask  (B, T) float, 1 on each turn's last sampled token
        gen_log_prob   (B, T) float, generation log-probs on sampled tokens
        lengths        (B,)   long
    """
    if not trajectories:
        raise ValueError("collate() got no trajectories")
    lengths = [len(t.input_ids) for t in trajectories]
    B, T = len(trajectories), max(lengths)
    input_ids = torch.full((B, T), pad_id, dtype=torch.long)
    attention_mask = torch.zeros(B, T, dtype=torch.long)
    response_mask = torch.zeros(B, T)
    turn_end_mask = torch.zeros(B, T)
    gen_log_prob = torch.zeros(B, T)
    for i, traj in enumerate(trajectories):
        n = lengths[i]
        input_ids[i, :n] = torch.tensor(traj.input_ids, dtype=torch.long)
        attention_mask[i, :n] = 1
        response_mask[i, :n] = torch.tensor(traj.response_mask, dtype=torch.float)
        gen_log_prob[i, :n] = torch.tensor(traj.gen_logprobs, dtype=torch.float)
        if traj.turn_ends:
            turn_end_mask[i, torch.tensor(traj.turn_ends, dtype=torch.long)] = 1.0
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "response_mask": response_mask,
        "turn_end_mask": turn_end_mask,
        "gen_log_prob": gen_log_prob,
        "lengths": torch.tensor(lengths, dtype=torch.long),
    }


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
        raise ValueError(f"unknown turn baseline {turn_baseline!r}: use turn or state")
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
            raise ValueError(f"unknown reward placement {placement!r}: use trajectory or turn")
    return rewards


def token_budget_micro_batches(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Pack sample indices into micro-batches whose PADDED size stays within a budget.

    Samples are sorted by length (longest first) and packed greedily: a micro-batch of
    n samples padded to its longest member costs ``n * max_len`` tokens. Sorting keeps
    lengths inside a micro-batch close, so padding waste stays small. A sample longer
    than the budget gets a micro-batch of its own.
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    current_max = 0
    for i in order:
        longest = max(current_max, lengths[i])
        if current and longest * (len(current) + 1) > token_budget:
            batches.append(current)
            current, longest = [], lengths[i]
        current.append(i)
        current_max = longest
    if current:
        batches.append(current)
    return batches


def padding_fraction(lengths: Sequence[int], batches: Sequence[Sequence[int]]) -> float:
    """Fraction of computed (padded) token slots that are padding."""
    real = sum(lengths[i] for b in batches for i in b)
    padded = sum(max(lengths[i] for i in b) * len(b) for b in batches if b)
    return 0.0 if padded == 0 else 1.0 - real / padded

"""What the trainer writes to ``trajectories/*.jsonl``: one bounded record per episode.

The rollout returns training *samples*; with a windowed context (``rollout.context_window``)
an episode of ten turns is ten samples that each repeat the whole episode's ``turns``.
Written as they are, a 40-step Sokoban run logs 166 MB. The trainer therefore writes:

* one record per **episode** (the same shape as ``ragen eval``'s ``trajectories.jsonl``:
  ``Trajectory.to_json()`` of its first sample without the per-sample ``turn_ends``,
  ``turn_rewards``, ``turn_index`` and ``reward_from_turn``);
* only the first ``max_episodes`` episodes, taking **whole groups** in ``group_id``
  order, so that a group's rollouts (the in-group variance StarPO-S ranks) stay together;
* what the update made of it: ``kept`` (the StarPO-S filter kept the episode's group)
  and ``advantages``, one entry per turn: the mean advantage over that turn's response
  tokens, or ``None`` for a turn that was not trained (filtered out, no tokens, or a
  validation rollout).

The viewer (``ragen view``) reads these records, as well as the older per-sample ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ragen.agent.trajectory import Trajectory

#: per-sample keys that mean nothing once the samples of an episode are merged
_PER_SAMPLE_KEYS = ("turn_ends", "turn_rewards", "turn_index", "reward_from_turn")


def should_log(step: int, every: int, total_steps: int) -> bool:
    """Whether completed step ``step`` writes its trajectories: the first step, every
    ``every``-th step and the last one (``every == 0``: never)."""
    if every <= 0:
        return False
    return step == 1 or step % every == 0 or step == total_steps


def turn_advantages(
    sample: Trajectory, advantages: Sequence[float], response_mask: Sequence[int]
) -> dict[int, float]:
    """Mean advantage over each turn's response tokens in one training row.

    ``advantages`` and ``response_mask`` are the row's values over ``input_ids`` (any
    padding after them is ignored). A full-history sample holds every turn, split at
    ``turn_ends``; a windowed sample holds the one turn ``turn_index``. Returns
    ``{turn number in the episode: mean advantage}`` for the turns with response tokens.
    """
    n = len(sample.input_ids)
    windowed = sample.reward_from_turn is not None
    ends = list(sample.turn_ends)
    out: dict[int, float] = {}
    start = 0
    for k, end in enumerate(ends):
        total = count = 0.0
        for t in range(start, min(end + 1, n)):
            if response_mask[t]:
                total += float(advantages[t])
                count += 1
        start = end + 1
        if count:
            turn = sample.turn_index + (0 if windowed else k)
            out[turn] = total / count
    return out


def episode_records(
    samples: Sequence[Trajectory],
    *,
    keep: Sequence[bool] | None = None,
    advantages: dict[int, dict[int, float]] | None = None,
    max_episodes: int | None = None,
) -> list[dict[str, Any]]:
    """One JSON record per episode of ``samples`` (module docstring).

    Args:
        samples: the rollout's samples, in rollout order.
        keep: per sample, whether the StarPO-S filter kept it (``None``: not filtered,
            e.g. validation; ``kept`` is then omitted).
        advantages: ``{sample index: {turn: mean advantage}}`` for the trained samples.
        max_episodes: bound on the episodes written (whole groups; at least one group).
    """
    episodes: dict[tuple[int, int], list[int]] = {}
    for i, s in enumerate(samples):
        episodes.setdefault((s.group_id, s.episode_id), []).append(i)
    groups: dict[int, list[tuple[int, int]]] = {}
    for key in episodes:
        groups.setdefault(key[0], []).append(key)
    chosen: list[tuple[int, int]] = []
    for gid in sorted(groups):
        members = groups[gid]
        if max_episodes is not None and chosen and len(chosen) + len(members) > max_episodes:
            break
        chosen.extend(members)
    records = []
    for key in chosen:
        rows = episodes[key]
        record = samples[rows[0]].to_json()
        for k in _PER_SAMPLE_KEYS:
            record.pop(k, None)
        record["samples"] = len(rows)
        if keep is not None:
            record["kept"] = bool(any(keep[i] for i in rows))
        per_turn: list[float | None] = [None] * len(record["turns"])
        for i in rows:
            for turn, value in (advantages or {}).get(i, {}).items():
                if 0 <= turn < len(per_turn):
                    per_turn[turn] = round(value, 6)
        record["advantages"] = per_turn
        records.append(record)
    return records

"""Rollout metrics shared by ``ragen eval`` and the trainer.

Everything is computed per EPISODE: windowed samples (several per episode) are grouped
by ``episode_id`` first, so a metric does not depend on the context policy.

Keys (all floats):

=======================  ==========================================================
episodes                 number of episodes
success_rate             fraction of episodes with ``success``
reward_mean / _std       mean / population std of ``episode_reward`` (incl. format shaping)
reward_min / _max        extremes of ``episode_reward``
env_reward_mean          mean episode reward from the env alone (no format shaping)
pass_at_k                fraction of groups (same ``group_id``) with at least one success
group_size               k used by pass_at_k (given, or the mean group size found)
group_reward_std         mean over groups of the in-group std of ``episode_reward``
                         (echo-trap signal; ``ragen.algo.groups.group_reward_std``,
                         the statistic the StarPO-S filter ranks groups by)
valid_action_rate        valid actions / executed actions
effective_action_rate    effective actions / executed actions
mean_turns               turns per episode
mean_actions             executed actions per episode
response_length          sampled tokens per turn (episodes with token ids only)
format_error_rate        badly formatted turns / turns
truncation_rate          fraction of episodes ended by ``max_model_len`` (end_reason
                         ``context_overflow``)
env_truncation_rate      fraction of episodes the env truncated (``env_truncated``)
env_error_rate           fraction of episodes ended by an env failure (an exception, a
                         server that did not answer; ``Trajectory.env_error``)
reward/grounding         mean over turns of the reasoning scores (present only when the
reward/world_model       reply format and env produce them; malformed turns count 0;
reward/consistency       ``ragen.agent.reasoning_rewards``), rewarded or not
reward/progress          mean over turns of the progress shaping ``w * (Phi(s') - Phi(s))``
                         (only with ``rollout.progress_reward > 0``)
thought_words            words per turn in the thought (turns of a format with one)
thought_distinct         distinct thoughts / thoughts over those turns (exact text match):
                         the echo trap repeats one thought whatever the input
win_rate / draw_rate /   fraction of episodes whose game ended in a win / draw / loss
loss_rate                (the last turn's ``info["outcome"]``, two-player TextArena); only
unfinished_rate          for envs that report outcomes; unfinished: no result yet (the
                         turn budget ran out first). win_rate counts what success_rate
                         counts; the split tells a draw from a loss
=======================  ==========================================================
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

from .reasoning_rewards import REASONING_REWARDS
from .trajectory import Trajectory


def episodes_of(trajectories: Sequence[Trajectory]) -> list[list[Trajectory]]:
    """Samples grouped by ``(group_id, episode_id)``, in first-seen order."""
    by_key: dict[tuple[int, int], list[Trajectory]] = {}
    for t in trajectories:
        by_key.setdefault((t.group_id, t.episode_id), []).append(t)
    return list(by_key.values())


def _mean(xs: Sequence[float]) -> float:
    return float(sum(xs) / len(xs)) if xs else 0.0


def _std(xs: Sequence[float]) -> float:
    if len(xs) < 2:
        return 0.0
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))


def _group_reward_std(heads: Sequence[Trajectory]) -> float:
    """Mean over groups of the in-group episode-reward std, one head sample per episode."""
    # deferred: the one definition lives in ragen.algo, which imports torch, and
    # importing ragen.agent stays torch-free for text-only evaluation
    from ragen.algo.groups import group_reward_std

    std = group_reward_std(
        [h.episode_reward for h in heads],
        [h.group_id for h in heads],
        episode_ids=[h.episode_id for h in heads],
    )
    return float(std.mean())


def rollout_metrics(
    trajectories: Sequence[Trajectory], group_size: int | None = None
) -> dict[str, float]:
    """The metrics table above for a rollout batch (empty input -> ``{"episodes": 0}``)."""
    episodes = episodes_of(trajectories)
    if not episodes:
        return {"episodes": 0.0}
    heads = [samples[0] for samples in episodes]  # episode-level facts live on every sample
    rewards = [h.episode_reward for h in heads]
    env_rewards = [sum(turn.env_reward for turn in h.turns) for h in heads]
    n_actions = sum(h.num_actions for h in heads)
    n_turns = sum(h.num_turns for h in heads)

    groups: dict[int, list[Trajectory]] = defaultdict(list)
    for h in heads:
        groups[h.group_id].append(h)
    if group_size is None:
        group_size = round(_mean([len(g) for g in groups.values()]))

    token_turns = [
        (sum(s.num_response_tokens for s in samples), samples[0].num_turns)
        for samples in episodes
        if any(s.input_ids for s in samples)
    ]
    out = {
        "episodes": float(len(heads)),
        "success_rate": _mean([float(h.success) for h in heads]),
        "reward_mean": _mean(rewards),
        "reward_std": _std(rewards),
        "reward_min": float(min(rewards)),
        "reward_max": float(max(rewards)),
        "env_reward_mean": _mean(env_rewards),
        "pass_at_k": _mean([float(any(h.success for h in g)) for g in groups.values()]),
        "group_size": float(group_size),
        "group_reward_std": _group_reward_std(heads),
        "valid_action_rate": sum(h.num_valid_actions for h in heads) / n_actions
        if n_actions
        else 0.0,
        "effective_action_rate": (
            sum(h.num_effective_actions for h in heads) / n_actions if n_actions else 0.0
        ),
        "mean_turns": n_turns / len(heads),
        "mean_actions": n_actions / len(heads),
        "format_error_rate": sum(h.num_format_errors for h in heads) / n_turns if n_turns else 0.0,
        # episodes cut because the next prompt did not fit max_model_len
        "truncation_rate": _mean([float(h.end_reason == "context_overflow") for h in heads]),
        # episodes the env truncated (a hidden step limit, gymnasium's TimeLimit)
        "env_truncation_rate": _mean([float(h.end_reason == "env_truncated") for h in heads]),
        # of those, the episodes a failure of the env cut (rollout.max_env_error_share)
        "env_error_rate": _mean([float(h.env_error is not None) for h in heads]),
    }
    out.update(_reasoning_metrics(heads))
    out.update(_outcome_metrics(heads))
    if token_turns:
        total_tokens = sum(n for n, _ in token_turns)
        total_turns = sum(t for _, t in token_turns)
        out["response_length"] = total_tokens / total_turns if total_turns else 0.0
    return out


#: the game results an env may report in ``info["outcome"]`` (two-player TextArena)
OUTCOMES = ("win", "draw", "loss")


def _outcome_metrics(heads: Sequence[Trajectory]) -> dict[str, float]:
    """``win_rate``, ``draw_rate``, ``loss_rate`` and ``unfinished_rate`` over the
    episodes, when any of them reported a game result; else nothing."""
    results = [h.turns[-1].info.get("outcome") if h.turns else None for h in heads]
    if not any(r in OUTCOMES for r in results):
        return {}
    out = {f"{k}_rate": _mean([float(r == k) for r in results]) for k in OUTCOMES}
    out["unfinished_rate"] = _mean([float(r not in OUTCOMES) for r in results])
    return out


def _reasoning_metrics(heads: Sequence[Trajectory]) -> dict[str, float]:
    """``reward/<name>`` per reasoning reward and ``thought_words``, over all turns."""
    turns = [turn for h in heads for turn in h.turns]
    out: dict[str, float] = {}
    for name in REASONING_REWARDS:
        scores = [
            turn.info["reasoning_scores"][name]
            for turn in turns
            if name in turn.info.get("reasoning_scores", {})
        ]
        if scores:
            out[f"reward/{name}"] = _mean(scores)
    progress = [turn.info["progress_reward"] for turn in turns if "progress_reward" in turn.info]
    if progress:  # rollout.progress_reward > 0: the weighted shaping, mean per turn
        out["reward/progress"] = _mean(progress)
    with_thought = [turn for turn in turns if turn.format_ok and turn.thought]
    if with_thought:
        out["thought_words"] = _mean([len(turn.thought.split()) for turn in with_thought])
        thoughts = [" ".join(turn.thought.split()) for turn in with_thought]
        out["thought_distinct"] = len(set(thoughts)) / len(thoughts)
    return out


def success_by_state(trajectories: Sequence[Trajectory]) -> dict[int, float]:
    """Success per initial state: ``{seed: share of its episodes that succeeded}`` (one
    episode per state, as in evaluation: 0.0 or 1.0). Windowed samples count once per
    episode. The pairing key of before/after gains on the same states (``ragen.stats``)."""
    wins: dict[int, list[bool]] = defaultdict(list)
    for samples in episodes_of(trajectories):
        wins[samples[0].seed].append(bool(samples[0].success))
    return {seed: sum(w) / len(w) for seed, w in wins.items()}

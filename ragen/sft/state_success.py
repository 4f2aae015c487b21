"""How often an in-training model solves its own SFT states: the measure an SFT run can
stop on (``SFTConfig.stop_at_success``).

A warm start that already plays as well as RL could make it leaves RL nothing to show;
one that has not learned to read the state leaves RL nothing to build on. Stopping SFT
once the model solves a given share of the states it is trained on picks the warm start
on training data alone (the validation states are never looked at), at the same point
of competence whatever the seed or the float rounding of the run.
"""

from __future__ import annotations

from dataclasses import replace

from ragen.agent.env_manager import EnvStateManager
from ragen.agent.evaluate import build_policy
from ragen.agent.metrics import success_by_state
from ragen.agent.rollout import RolloutConfig, run_rollout


def training_state_success(
    model,
    tokenizer,
    env: str,
    env_config: dict,
    rollout: RolloutConfig,
    seed: int,
    seeds_step: int,
    episodes: int,
    temperature: float,
) -> float:
    """Success of ``model`` on the first ``episodes`` initial states of SFT's training
    data (the states of ``EnvStateManager(..., seed=seed).seeds_for_step(seeds_step)``:
    group g's state depends on (seed, step, g) alone), one episode each, sampled at
    ``temperature`` with a fixed sampling seed, so two checks of one model agree."""
    manager = EnvStateManager(env, dict(env_config), env_groups=episodes, group_size=1, seed=seed)
    try:
        states = manager.seeds_for_step(seeds_step)
        policy = build_policy(model, tokenizer)
        played = run_rollout(
            policy, manager, replace(rollout, temperature=temperature, seed=0), states
        )
    finally:
        manager.close()
    wins = success_by_state(played.trajectories)
    return sum(wins.values()) / max(len(wins), 1)

"""The SFT env's episodes: the solver's, tokenized as the RL rollout tokenizes them (what
SFT trains on), and the model's own on the same states (what an SFT run can stop on).

The expert episodes are oracle rollouts (with ``epsilon`` noise; DAgger-style relabelling
with ``labels="expert"``) played by the same rollout and context machinery as RL, so
every sample's loss mask is exactly its assistant tokens. They come from training states
that no RL step reaches (:data:`SFT_SEED_STEP`), a held-out slice of other training
states (:data:`SFT_HELDOUT_STEP`), or, to probe a model, the validation states.

:func:`training_state_success` is how often an in-training model solves its own SFT
states (``SFTConfig.stop_at_success``). A warm start that already plays as well as RL
could make it leaves RL nothing to show; one that has not learned to read the state
leaves RL nothing to build on. Stopping SFT once the model solves a given share of the
states it is trained on picks the warm start on training data alone (the validation
states are never looked at), at the same point of competence whatever the seed or the
float rounding of the run.
"""

from __future__ import annotations

from dataclasses import replace

from ragen.agent.env_manager import EnvStateManager
from ragen.agent.evaluate import build_policy
from ragen.agent.metrics import success_by_state
from ragen.agent.policies import OraclePolicy, RelabeledPolicy
from ragen.agent.rollout import RolloutConfig, run_rollout
from ragen.agent.trajectory import Trajectory
from ragen.errors import UsageError

from .config import SFTConfig

SFT_SEED_STEP = 10_000_000  # the training-seed step SFT's expert episodes start from
SFT_HELDOUT_STEP = 10_000_001  # ... and the step of the held-out slice (never trained on)


def make_expert_data(
    tokenizer, cfg: SFTConfig, split: str = "train", behavior=None
) -> list[Trajectory]:
    """Oracle rollouts (with ``epsilon`` noise) as token-exact samples, on training states
    (``split="train"``, what SFT trains on), on other training states kept apart from
    them (``split="heldout"``: the slice that measures fit, ``cfg.heldout_episodes``
    episodes) or on the held-out validation states (``split="validation"``: expert
    answers to probe a model on states it never saw; never train on these).

    With ``cfg.labels == "expert"`` every target is the solver's move in the state the
    episode is in (:class:`~ragen.agent.policies.RelabeledPolicy`): the noisy expert, or
    ``behavior`` (a :class:`~ragen.agent.policies.Policy`, e.g. the learner: DAgger),
    picks the moves that run; turns the solver cannot answer are dropped.
    """
    if split not in ("train", "heldout", "validation"):
        raise UsageError(f"split must be train, heldout or validation, got {split!r}")
    cfg.validate()

    episodes = cfg.heldout_episodes if split == "heldout" else cfg.episodes
    if episodes < 1:
        raise UsageError(f"no {split} episodes to make (heldout_episodes={episodes})")
    manager = EnvStateManager(
        cfg.env, dict(cfg.env_config), env_groups=episodes, group_size=1, seed=cfg.seed
    )
    relabel = cfg.labels == "expert" and (cfg.epsilon > 0 or behavior is not None)
    if behavior is not None and not relabel:
        raise UsageError("a behavior policy needs labels=expert (its moves are not targets)")
    policy = OraclePolicy(
        actions_per_turn=cfg.actions_per_turn,
        epsilon=0.0 if relabel else cfg.epsilon,
        seed=cfg.seed,
        tokenizer=tokenizer,
    )
    if relabel:
        if behavior is None:
            behavior = OraclePolicy(cfg.actions_per_turn, cfg.epsilon, seed=cfg.seed + 1)
        policy = RelabeledPolicy(label=policy, behavior=behavior)
    # SFT episodes are training states (never validation states), drawn as steps that
    # no RL run reaches
    if split == "train":
        seeds = manager.seeds_for_step(SFT_SEED_STEP)
    elif split == "heldout":
        seeds = manager.seeds_for_step(SFT_HELDOUT_STEP)
    else:
        seeds = manager.validation_seeds(episodes)
    result = run_rollout(policy, manager, replace(cfg.rollout, seed=cfg.seed), seeds)
    data = [t for t in result.trajectories if t.num_response_tokens > 0]
    if relabel:  # drop the turns the solver had no answer for (their reply is random)
        data = [t for t in data if _expert_labelled(t)]
    if cfg.only_successful:
        data = [t for t in data if t.success]
    if not data:
        raise UsageError(
            f"no expert trajectories for env {cfg.env!r}: the expert solved none of "
            f"{cfg.episodes} episodes. Fix: only_successful=false, or a lower epsilon"
        )
    return data


def auxiliary_config(cfg: SFTConfig) -> SFTConfig:
    """The config of the auxiliary data: ``cfg`` with the auxiliary reply format, its own
    episode count and other training states (a seed no other data uses); no held-out
    slice, so nothing that reads one (the end-of-SFT fit floor) either."""
    rollout = replace(cfg.rollout, reasoning=cfg.aux_reasoning)
    return replace(
        cfg, rollout=rollout, episodes=cfg.aux_episodes, seed=cfg.seed + 7919,
        aux_reasoning=None, aux_episodes=0, heldout_episodes=0, end_fit_min_reply_accuracy=0.0,
    )  # fmt: skip


def _expert_labelled(t: Trajectory) -> bool:
    """Whether every reply in sample ``t`` is the solver's own answer to its state."""
    windowed = t.reward_from_turn is not None  # one turn's reply per sample
    turns = t.turns[t.turn_index : t.turn_index + 1] if windowed else t.turns
    return all(turn.info.get("expert_label", True) for turn in turns)


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

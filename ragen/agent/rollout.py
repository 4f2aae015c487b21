"""The rollout phase of StarPO: a batch of multi-turn episodes, one generation call per turn.

    manager = EnvStateManager("sokoban", env_groups=8, group_size=16)
    result = run_rollout(ModelPolicy(engine, tok), manager, RolloutConfig(), manager.seeds_for_step(0))
    result.trajectories  # list[Trajectory], token-exact training samples
    result.stats         # generated_tokens, tokens_per_s, ...

Per turn, for every live environment: build the user message (turn number of
``max_turns``, state, previous reward, actions left), extend the token context
(``ContextManager``), and end the episode (``context_overflow``) if
``len(prompt) + max_new_tokens > max_model_len``. Then ONE ``policy.act`` call for all
live environments. Each response is parsed strictly (``parse_reply`` for the
``reasoning`` format); a malformed
turn executes nothing and earns ``format_penalty``, a well-formed one earns
``format_reward`` plus the env rewards of its executed actions (at most
``max_actions_per_turn``, within ``max_actions_per_trajectory``).

An episode ends, and its trajectories record why (``Trajectory.end_reason``), when the
env terminates (``terminated``; also a single-turn env's one response) or truncates
(``env_truncated``), the trajectory action budget is spent (``action_budget``), the
next prompt does not fit (``context_overflow``), or after ``max_turns`` (``turn_limit``).

An env that fails (an exception in its step or reset, a served env whose server does not
answer) ends that episode as ``env_truncated`` with ``Trajectory.env_error`` saying why;
an episode whose reset failed ends before its first turn (no tokens, nothing to train
on). When more than ``max_env_error_share`` of the batch's episodes end that way the
rollout raises :class:`~ragen.errors.EnvUnavailableError`: a run stops with the reason
instead of training on episodes of a broken env.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ragen.engines.base import SamplingParams
from ragen.envs.base import derive_seed
from ragen.envs.facts import format_facts
from ragen.envs.visual import has_image_observations, png_data_uri
from ragen.errors import ConfigError, EnvUnavailableError
from ragen.progress import Progress

from . import prompts
from .context import ChatFormat, ContextManager, SampleIds
from .env_manager import EnvStateManager
from .env_steps import play_all
from .policies import Policy, PolicyOutput, TurnRequest
from .reasoning import ANSWER_CLOSE, check_env_supports, clean_text, needs_facts, parse_reply
from .reasoning_rewards import ReasoningScores, applicable_rewards, score_turn
from .rollout_config import RolloutConfig, format_rewards
from .trajectory import Trajectory, TurnRecord
from .visual_context import chat_format_for

# RolloutConfig and format_rewards live in rollout_config.py; imported from here too
__all__ = ["RolloutConfig", "RolloutResult", "format_rewards", "run_rollout"]


@dataclass
class RolloutResult:
    trajectories: list[Trajectory]
    stats: dict[str, float] = field(default_factory=dict)


@dataclass
class _Episode:
    """Mutable per-environment state while the batch plays."""

    index: int
    group: int
    seed: int
    system: str
    observation: str
    ctx: ContextManager | None
    messages: list[dict[str, str]] = field(default_factory=list)  # chat history (text)
    turns: list[TurnRecord] = field(default_factory=list)
    turn_rewards: list[float] = field(default_factory=list)
    # what the next prompt reports as "last reward": the env's reward plus format shaping;
    # the reasoning reward is a training signal about the thought, never shown to the
    # policy (an unfamiliar number in the prompt would also change what it reads)
    shown_rewards: list[float] = field(default_factory=list)
    turn_token_counts: list[int] = field(default_factory=list)
    success: bool = False
    end_reason: str | None = None  # one of trajectory.END_REASONS once the episode ended
    num_actions: int = 0
    num_valid: int = 0
    num_effective: int = 0
    num_format_errors: int = 0
    # the pictures the policy was shown this turn (a visual env, a policy with a
    # tokenizer); the turn record keeps them as PNG so the viewer shows what it saw
    pictures: list | None = None
    env_error: str | None = None  # why the env failed, when it did (Env.env_error)
    # the group's index in the whole rollout (run_rollout's group_ids): part of the
    # episode's sampling seeds, so a shard of the groups samples what the whole would
    sample_group: int = 0

    @property
    def done(self) -> bool:
        return self.end_reason is not None


def _chat_format(policy: Policy, strategy: str) -> ChatFormat | None:
    """The policy's ChatFormat, cached on the policy (the template probe runs once)."""
    if policy.tokenizer is None:
        return None
    cache = policy.__dict__.setdefault("_ragen_chat_formats", {})
    if strategy not in cache:
        eos = getattr(getattr(policy, "engine", None), "eos_token_ids", None)
        # a VLM's processor gives a VisionChatFormat (pictures in the prompt ids)
        cache[strategy] = chat_format_for(policy.tokenizer, strategy, eos)
    return cache[strategy]


def run_rollout(
    policy: Policy,
    manager: EnvStateManager,
    config: RolloutConfig,
    seeds: list[int],
    group_ids: list[int] | None = None,
) -> RolloutResult:
    """Play one batch: ``manager.env_groups`` groups from ``seeds`` (one initial-state
    seed per group: ``manager.seeds_for_step(step)`` or ``manager.validation_seeds()``),
    ``manager.group_size`` episodes each, up to ``config.max_turns``.

    Every episode's turn samples from its own seed, ``derive_seed("sample", config.seed,
    group, member, turn)`` (``TurnRequest.sample_seed``), so what an episode plays does
    not depend on the other episodes of the call. ``group_ids``: each group's index in
    the whole rollout when this call plays a shard of it (a rollout worker); default
    ``0 .. env_groups - 1``."""
    config.validate()
    if group_ids is None:
        group_ids = list(range(manager.env_groups))
    if len(group_ids) != manager.env_groups:
        raise ValueError(f"{len(group_ids)} group_ids for {manager.env_groups} groups")
    tic = time.perf_counter()
    observations = manager.reset(seeds)
    fmt = _chat_format(policy, config.template_strategy)
    # the model's own context limit (when the engine knows it) caps the configured one
    engine_limit = getattr(getattr(policy, "engine", None), "max_positions", None)
    max_model_len = min(config.max_model_len, int(engine_limit or config.max_model_len))

    episodes: list[_Episode] = []
    for i, env in enumerate(manager.envs):
        check_env_supports(config.reasoning, env.fact_kinds, env.name or type(env).__name__)
        if config.progress_reward > 0 and not getattr(env, "progress_potential_meaning", ""):
            raise ConfigError(
                f"rollout.progress_reward={config.progress_reward}: env "
                f"{env.name or type(env).__name__!r} has no progress potential "
                "(Env.progress_potential). Fix: rollout.progress_reward=0, or implement "
                "progress_potential() and progress_potential_meaning on the env"
            )
        system = prompts.system_message(
            env.instructions,
            config.reasoning,
            config.separator,
            config.max_actions_per_turn,
            style=config.prompt_style,
            action_names=env.action_names,
            fact_kinds=tuple(env.fact_kinds),
            prediction_kinds=tuple(env.prediction_kinds),
        )
        g = manager.group_of(i)
        ctx = ContextManager(fmt, system, config.context_window) if fmt else None
        episodes.append(
            _Episode(
                i, g, int(seeds[g]), system, observations[i], ctx, sample_group=int(group_ids[g])
            )
        )

    stats = {"generated_tokens": 0.0, "generation_seconds": 0.0, "generate_calls": 0.0}
    turns = Progress("rollout", config.max_turns, "turn")
    for turn in range(config.max_turns):
        live, requests = [], []
        for ep in episodes:
            if ep.done:
                continue
            if manager.envs[ep.index].done:  # ended outside a step: a failed reset (an env
                _end_after_last_turn(ep, "env_truncated")  # bug, a server that is down)
                continue
            request = _open_turn(ep, manager, config, turn, max_model_len)
            if request is not None:
                live.append(ep)
                requests.append(request)
        if not requests:
            break
        params = SamplingParams(
            temperature=config.temperature,
            top_p=config.top_p,
            top_k=config.top_k,
            max_new_tokens=config.max_new_tokens,
            stop_strings=[ANSWER_CLOSE],
            seed=derive_seed("rollout", config.seed, turn, *seeds) % (2**31),
            # the current state alone: no later prompt extends this one, keep no K/V
            keep_kv=config.context_window != 0,
        )
        t0 = time.perf_counter()
        outputs = policy.act(requests, params)
        stats["generation_seconds"] += time.perf_counter() - t0
        stats["generate_calls"] += 1
        if len(outputs) != len(requests):
            raise RuntimeError(f"policy returned {len(outputs)} outputs for {len(requests)}")
        envs = [manager.envs[ep.index] for ep in live]
        replies = [
            _read_reply(ep, env, out, config, fmt) for ep, env, out in zip(live, envs, outputs)
        ]
        # the env steps of all episodes: from threads when the envs wait on a network
        played = play_all(envs, [reply.executed for reply in replies])
        for ep, env, request, out, reply, steps in zip(
            live, envs, requests, outputs, replies, played
        ):
            _record_turn(ep, env, request, out, reply, steps, config)
            if out.token_ids is not None:
                stats["generated_tokens"] += reply.n_tokens
        turns.advance()
    turns.close()
    for ep in episodes:
        if not ep.done:  # still going after the last allowed turn
            _end_after_last_turn(ep, "turn_limit")

    for ep in episodes:
        ep.env_error = getattr(manager.envs[ep.index], "env_error", None)
    _check_env_errors(episodes, config)
    trajectories = [t for ep in episodes for t in _build_trajectories(ep, manager, policy)]
    wall = time.perf_counter() - tic
    stats.update(
        tokens_per_s=stats["generated_tokens"] / max(stats["generation_seconds"], 1e-9),
        rollout_seconds=wall,
        rollout_tokens_per_s=stats["generated_tokens"] / max(wall, 1e-9),
        episodes=float(len(episodes)),
        samples=float(len(trajectories)),
        context_overflow_episodes=float(
            sum(ep.end_reason == "context_overflow" for ep in episodes)
        ),
        context_fallbacks=float(sum(ep.ctx.num_fallbacks for ep in episodes if ep.ctx)),
        context_inexact=float(sum(not t.context_exact for t in trajectories if t.input_ids)),
        env_error_episodes=float(sum(ep.env_error is not None for ep in episodes)),
    )
    return RolloutResult(trajectories, stats)


def _check_env_errors(episodes: list[_Episode], config: RolloutConfig) -> None:
    """Raise :class:`EnvUnavailableError` when more than ``max_env_error_share`` of the
    episodes ended by an env failure: their data says nothing about the policy."""
    failed = [ep for ep in episodes if ep.env_error is not None]
    if not failed or len(failed) <= config.max_env_error_share * len(episodes):
        return

    raise EnvUnavailableError(
        f"{len(failed)} of {len(episodes)} episodes ended because the environment failed "
        f"(more than rollout.max_env_error_share={config.max_env_error_share:g}); the "
        f"first (seed {failed[0].seed}): {failed[0].env_error}. Fix: the env or its "
        "server; a higher rollout.max_env_error_share tolerates more failed episodes"
    )


# -- one turn ------------------------------------------------------------------------
def _actions_left(ep: _Episode, config: RolloutConfig) -> int:
    return config.max_actions_per_trajectory - ep.num_actions


def _open_turn(
    ep: _Episode, manager: EnvStateManager, config: RolloutConfig, turn: int, max_model_len: int
) -> TurnRequest | None:
    """Build turn ``turn``'s prompt; None (the episode ends: ``context_overflow``) when
    it does not fit ``max_model_len``."""
    left = _actions_left(ep, config)
    prev = ep.shown_rewards[-1] if ep.shown_rewards else None
    user = prompts.user_message(
        turn,
        ep.observation,
        left,
        config.max_actions_per_turn,
        prev,
        config.reasoning,
        max_turns=config.max_turns,
        style=config.prompt_style,
    )
    prompt_ids, images = None, None
    if ep.ctx is not None:
        env = manager.envs[ep.index]
        # a visual env's pictures of this observation (ragen.envs.visual); a text policy
        # without a tokenizer reads the text only
        pictures = env.observation_images() if has_image_observations(env) else None
        ep.pictures = pictures
        prompt_ids = ep.ctx.next_prompt(user, pictures)
        images = ep.ctx.prompt_images or None
        if len(prompt_ids) + config.max_new_tokens > max_model_len:
            ep.ctx.cancel_prompt()
            _end_after_last_turn(ep, "context_overflow")
            return None
    history = ep.messages
    if config.context_window is not None:  # text history follows the same window
        keep = 2 * config.context_window
        history = history[max(0, len(history) - keep) :] if keep else []
    messages = [{"role": "system", "content": ep.system}, *history]
    messages.append({"role": "user", "content": user})
    ep.messages.append({"role": "user", "content": user})
    member = ep.index % manager.group_size
    return TurnRequest(
        env=manager.envs[ep.index],
        messages=messages,
        prompt_ids=prompt_ids,
        images=images,
        turn=turn,
        max_actions=min(config.max_actions_per_turn, left),
        reasoning=config.reasoning,
        separator=config.separator,
        rng_seed=derive_seed("policy", config.seed, ep.seed, member, turn),
        sample_seed=derive_seed("sample", config.seed, ep.sample_group, member, turn),
    )


@dataclass
class _Reply:
    """A turn's reply, read and scored before any of its actions runs."""

    text: str
    parsed: Any
    executed: list[str]  # the actions to run (within the budgets)
    scores: ReasoningScores
    potential: float  # Phi(s) before the actions (0 when progress shaping is off)
    observation: str  # the state the reply answered
    n_tokens: int
    # the env's facts of that state and the intended outcome of the actions, as text,
    # when the format states facts (None otherwise): recorded for the viewer
    facts: dict[str, str] | None = None


def _read_reply(
    ep: _Episode, env: Any, out: PolicyOutput, config: RolloutConfig, fmt: ChatFormat | None
) -> _Reply:
    """Record the response in the context and parse and score it (the env is not stepped)."""
    observation = ep.observation  # the state this turn answered
    # a reply with a lone surrogate is a format error of this turn (parse_reply),
    # never an exception when it is tokenized or written to disk
    text = clean_text(out.text if isinstance(out.text, str) else str(out.text))
    n_tokens = 0
    if ep.ctx is not None and fmt is not None:
        ids = out.token_ids if out.token_ids is not None else fmt.encode(text)
        text = ep.ctx.add_response(ids, out.logprobs, ended_by_eos=out.finish_reason == "eos")
        n_tokens = len(ids)
    ep.messages.append({"role": "assistant", "content": text})

    parsed = parse_reply(_cut_at_stop(text, out.finish_reason), config.reasoning, config.separator)
    budget = min(config.max_actions_per_turn, _actions_left(ep, config))
    executed = parsed.actions[:budget] if parsed.format_ok else []
    if "execute" in out.info:  # a relabeling policy (SFT data): the reply is the label of
        executed = [str(a) for a in out.info["execute"]][:budget]  # the state; these run
    # scored against the state the reply answered, before any action runs
    truth = _facts_before(env, config.reasoning, executed)
    scores = _score_reasoning(env, parsed, config.reasoning, executed, truth)
    potential = env.progress_potential() if config.progress_reward > 0 else 0.0
    facts = {k: format_facts(v) for k, v in zip(("state", "intended"), truth)} if truth else None
    return _Reply(text, parsed, executed, scores, potential, observation, n_tokens, facts)


def _facts_before(env: Any, reasoning: str, actions: list[str]) -> tuple[list, list] | None:
    """The truth a structured thought is checked against, taken before ``actions`` run:
    the state's facts and the intended outcome of ``actions`` (the reasoning rewards
    score against them, and the turn record keeps them for ``ragen view``); None when
    the format states no facts."""
    if not (needs_facts(reasoning) and env.fact_kinds):
        return None
    return env.state_facts(), env.predict_facts(list(actions))


def _facts_after(env: Any, before: dict[str, str]) -> dict[str, str]:
    """``before`` plus ``next``: the facts of the prediction's kinds after the actions ran
    (what happened, which a slippery env makes differ from ``intended``)."""
    kinds = set(env.prediction_kinds)
    after = [f for f in env.state_facts() if f.kind in kinds]
    return {**before, "next": format_facts(after)}


def _record_turn(
    ep: _Episode,
    env: Any,
    request: TurnRequest,
    out: PolicyOutput,
    reply: _Reply,
    steps: list[tuple[str, float, bool, bool, dict[str, Any]]],
    config: RolloutConfig,
) -> None:
    """Account the turn's steps: rewards, counters, the end reason, the turn record."""
    parsed, scores = reply.parsed, reply.scores
    env_reward, valid, effective = 0.0, [], []
    for obs, reward, _, _, info in steps:
        ep.observation = obs
        env_reward += reward
        valid.append(bool(info.get("action_is_valid", False)))
        effective.append(bool(info.get("action_is_effective", False)))
        ep.success = ep.success or bool(info.get("success", False))
    executed = reply.executed[: len(valid)]
    ep.num_actions += len(executed)
    ep.num_valid += sum(valid)
    ep.num_effective += sum(effective)
    if not parsed.format_ok:
        ep.num_format_errors += 1
    shaping = config.format_reward if parsed.format_ok else config.format_penalty
    reasoning_reward = scores.total(config.reward_weights)
    progress = 0.0
    if config.progress_reward > 0:  # Phi(s') - Phi(s): 0 for a turn that moved nothing
        progress = config.progress_reward * (env.progress_potential() - reply.potential)
    reward = env_reward + shaping + reasoning_reward + progress
    ep.turn_rewards.append(reward)
    ep.shown_rewards.append(env_reward + shaping)
    ep.turn_token_counts.append(reply.n_tokens)
    terminated, truncated = (steps[-1][2], steps[-1][3]) if steps else (False, False)
    # a game's result (two-player TextArena: win / draw / loss), kept for the metrics
    outcome = steps[-1][4].get("outcome") if steps else None
    ep.end_reason = _end_reason(
        bool(terminated),
        bool(truncated),
        single_turn=bool(getattr(env, "single_turn", False)),
        budget_spent=_actions_left(ep, config) <= 0,
    )
    ep.turns.append(
        TurnRecord(
            observation=reply.observation,
            response=reply.text,
            thought=parsed.thought,
            actions=parsed.actions,
            executed_actions=executed,
            env_reward=env_reward,
            format_ok=parsed.format_ok,
            reward=reward,
            done=ep.done,
            prompt=request.messages[-1]["content"],
            info={
                "format_error": parsed.error,
                "action_is_valid": valid,
                "action_is_effective": effective,
                "finish_reason": out.finish_reason,
                "num_tokens": reply.n_tokens,
                "reasoning_scores": scores.as_dict(),
                "reasoning_reward": reasoning_reward,
                **({"progress_reward": progress} if config.progress_reward > 0 else {}),
                **({"outcome": str(outcome)} if outcome else {}),
                # False where a relabeling policy had no expert label for the state
                **(
                    {"expert_label": out.info["expert_label"]} if "expert_label" in out.info else {}
                ),
                **({"facts": _facts_after(env, reply.facts)} if reply.facts else {}),
                **({"images": [png_data_uri(p) for p in ep.pictures]} if ep.pictures else {}),
            },
        )
    )


def _score_reasoning(
    env: Any, parsed: Any, reasoning: str, actions: list[str], truth: tuple | None = None
) -> ReasoningScores:
    """The reply's reasoning scores (ragen.agent.reasoning_rewards), computed for every
    turn that can earn them, rewarded or not, so that their decay is visible in the logs.

    ``actions`` are the ones about to run; the prediction is checked against the env's
    *intended* outcome of them (``Env.predict_facts``), taken before they run.
    """
    fact_kinds = tuple(env.fact_kinds)
    # an observation format other than the bare grid lists the facts in the observation
    states_facts = getattr(env, "observation_format", "grid") != "grid"
    wanted = applicable_rewards(reasoning, fact_kinds, env.action_names, states_facts)
    if not wanted:
        return ReasoningScores()
    true_facts, predicted = truth or (None, None)  # (_facts_before's, when taken)
    if true_facts is None and "grounding" in wanted:
        true_facts = env.state_facts()
    # what the answer would change: a turn that changes nothing earns no reasoning credit
    if predicted is None and fact_kinds:
        predicted = env.predict_facts(list(actions))
    before = env.predict_facts([]) if fact_kinds else None
    return score_turn(
        parsed,
        reasoning,
        true_facts=true_facts,
        predicted_truth=predicted,
        facts_before=before,
        fact_kinds=fact_kinds,
        prediction_kinds=tuple(env.prediction_kinds),
        action_names=env.action_names,
        observation_states_facts=states_facts,
    )


def _end_after_last_turn(ep: _Episode, reason: str) -> None:
    """End an episode between turns; its last turn record (if any) becomes the final one."""
    ep.end_reason = reason
    if ep.turns:
        ep.turns[-1].done = True


def _end_reason(
    terminated: bool, truncated: bool, single_turn: bool, budget_spent: bool
) -> str | None:
    """Why the episode ends after this turn, or None when it goes on.

    A terminal state wins over a truncation reported on the same step (nothing follows
    it to bootstrap from, as in gymnasium); a single-turn env's one response, well-formed
    or not, terminates its MDP.
    """
    if terminated or single_turn:
        return "terminated"
    if truncated:
        return "env_truncated"
    if budget_spent:
        return "action_budget"
    return None


def _cut_at_stop(text: str, finish_reason: str) -> str:
    """Drop what trails the first ``</answer>`` when generation stopped there.

    The engine stops at the token that completes the stop string; that token may carry
    a few more characters (e.g. ``"</answer>\\n"``) which are not the policy's choice.
    """
    if finish_reason == "stop" and ANSWER_CLOSE in text:
        return text[: text.index(ANSWER_CLOSE) + len(ANSWER_CLOSE)]
    return text


# -- trajectories ----------------------------------------------------------------------
def _build_trajectories(ep: _Episode, manager: EnvStateManager, policy: Policy) -> list[Trajectory]:
    env = manager.envs[ep.index]
    ep.success = ep.success or bool(getattr(env, "success", False))
    facts = dict(
        env_name=manager.env_name,
        seed=ep.seed,
        group_id=ep.group,
        episode_id=ep.index,
        episode_reward=float(sum(ep.turn_rewards)),
        success=ep.success,
        num_turns=len(ep.turns),
        num_actions=ep.num_actions,
        num_valid_actions=ep.num_valid,
        num_effective_actions=ep.num_effective,
        num_format_errors=ep.num_format_errors,
        end_reason=ep.end_reason,
        env_error=ep.env_error,
        turns=ep.turns,
        source=policy.name,
    )
    if ep.ctx is None:  # text-only policy: records, no ids
        return [Trajectory([], [], [], [], list(ep.turn_rewards), **facts)]
    out = []
    for s in ep.ctx.samples():
        if ep.ctx.window is None:
            out.append(_trajectory(s, _align_rewards(ep.turn_rewards, ep.turn_token_counts), facts))
            continue
        # windowed: one turn per sample; its credit is what the episode earned from then on
        rewards = [ep.turn_rewards[s.turn_index]] if s.turn_ends else []
        to_go = float(sum(ep.turn_rewards[s.turn_index :]))
        out.append(_trajectory(s, rewards, {**facts, "reward_from_turn": to_go}))
    return out


def _trajectory(s: SampleIds, rewards: list[float], facts: dict[str, Any]) -> Trajectory:
    return Trajectory(
        input_ids=s.input_ids,
        response_mask=s.response_mask,
        gen_logprobs=s.gen_logprobs,
        turn_ends=s.turn_ends,
        turn_rewards=rewards,
        turn_index=s.turn_index,
        context_exact=s.exact,
        turn_close_mask=s.turn_close_mask,
        images=s.images,
        **facts,
    )


def _align_rewards(rewards: list[float], token_counts: list[int]) -> list[float]:
    """One reward per ``turn_ends`` entry: a turn with no response ids has no end token,
    so its reward joins the previous turn's (or, for leading empty turns, the next one's).
    The sum is preserved whenever at least one turn has ids."""
    aligned: list[float] = []
    carry = 0.0
    for r, n in zip(rewards, token_counts):
        if n > 0:
            aligned.append(r + carry)
            carry = 0.0
        elif aligned:
            aligned[-1] += r
        else:
            carry += r
    return aligned

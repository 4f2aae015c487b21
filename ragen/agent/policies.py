"""Policies the rollout can run: a token model, a chat API, and two references.

Every policy maps a batch of :class:`TurnRequest` (one per live environment) to one
:class:`PolicyOutput` each, in ONE call per turn.

* :class:`ModelPolicy` -- a token engine (``ragen.engines``): sampled ids + log-probs,
  i.e. trainable trajectories.
* :class:`ChatPolicy` -- an OpenAI-compatible chat engine: text only, for evaluation.
* :class:`OraclePolicy` -- the env's solver (``env.oracle_action()``) written as a
  well-formed ``<think>..</think><answer>..</answer>`` response; ``epsilon`` swaps
  each action for a random one with that probability.
* :class:`RandomPolicy` -- uniformly random actions (``env.random_action(rng)``).

Text policies given a ``tokenizer`` are tokenized through the same context machinery
as the model (their text is encoded and kept as the "sampled" ids, log-probs 0), so
oracle rollouts are exact SFT samples in the multi-turn chat format the RL rollout uses.
"""

from __future__ import annotations

import copy
import dataclasses
import random
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from ragen.engines.base import SamplingParams
from ragen.envs.base import Env, derive_seed
from ragen.envs.facts import format_facts
from ragen.errors import UsageError

from .reasoning import SECTIONS, format_reply, parse_reply


@dataclass
class TurnRequest:
    """What a policy sees for one live environment in one turn."""

    env: Env
    messages: list[dict[str, str]]  # chat messages (system, ..., current user)
    prompt_ids: list[int] | None = None  # token prompt (when the rollout has a tokenizer)
    # the prompt's pictures ((H, W, 3) uint8, placeholder order) when the env is visual
    images: list | None = None
    turn: int = 0
    max_actions: int = 1  # actions this turn may execute (per-turn and trajectory budget)
    reasoning: str = "free_think"  # the reply format (ragen.agent.reasoning)
    separator: str = "||"
    rng_seed: int = 0  # reproducible per (rollout seed, episode, turn), batch-order free
    # the model's sampling seed of this turn (SamplingParams.row_seeds): per (rollout seed,
    # group, member, turn), so the episode samples the same ids in any batch or worker
    sample_seed: int | None = None


@dataclass
class PolicyOutput:
    text: str
    token_ids: list[int] | None = None  # sampled ids (None: text policy, tokenize the text)
    logprobs: list[float] | None = None  # per sampled id
    finish_reason: str = "stop"  # "stop" | "eos" | "length"
    info: dict[str, Any] = field(default_factory=dict)


class Policy(ABC):
    """``act(requests, params) -> outputs``, one output per request, same order."""

    name: str = "policy"
    tokenizer: Any = None  # set: the rollout builds token-exact samples

    @abstractmethod
    def act(self, requests: list[TurnRequest], params: SamplingParams) -> list[PolicyOutput]: ...


class ModelPolicy(Policy):
    """A token engine (``generate(prompt_ids, params) -> Generation``) and its tokenizer."""

    name = "model"

    def __init__(self, engine: Any, tokenizer: Any) -> None:
        if tokenizer is None:
            raise ValueError("ModelPolicy needs the model's tokenizer (for the chat template)")
        self.engine, self.tokenizer = engine, tokenizer

    def act(self, requests: list[TurnRequest], params: SamplingParams) -> list[PolicyOutput]:
        prompts = []
        for r in requests:
            if r.prompt_ids is None:
                raise ValueError("ModelPolicy needs prompt_ids; the rollout builds them")
            prompts.append(r.prompt_ids)
        if all(r.sample_seed is not None for r in requests):  # a stream per episode
            params = dataclasses.replace(params, row_seeds=[r.sample_seed for r in requests])
        if any(r.images for r in requests):  # a VLM engine (ragen.engines.hf_vlm)
            images = [list(r.images or []) for r in requests]
            generations = self.engine.generate(prompts, params, images=images)
        else:
            generations = self.engine.generate(prompts, params)
        if len(generations) != len(prompts):
            raise RuntimeError(
                f"engine returned {len(generations)} generations for {len(prompts)} prompts"
            )
        return [
            PolicyOutput(
                text=g.text,
                token_ids=list(g.token_ids),
                logprobs=list(g.logprobs),
                finish_reason=g.finish_reason,
            )
            for g in generations
        ]


class ChatPolicy(Policy):
    """An OpenAI-compatible chat engine (``chat(conversations, params) -> texts``)."""

    name = "chat"

    def __init__(self, chat_engine: Any, tokenizer: Any = None) -> None:
        self.engine, self.tokenizer = chat_engine, tokenizer

    def act(self, requests: list[TurnRequest], params: SamplingParams) -> list[PolicyOutput]:
        texts = self.engine.chat([r.messages for r in requests], params)
        if len(texts) != len(requests):
            raise RuntimeError(f"chat engine returned {len(texts)} replies for {len(requests)}")
        return [PolicyOutput(text=str(t)) for t in texts]


class _ActionPolicy(Policy):
    """Shared shape of the reference policies: pick actions, format a valid response."""

    def __init__(self, actions_per_turn: int = 1, seed: int = 0, tokenizer: Any = None) -> None:
        if actions_per_turn < 1:
            raise UsageError(
                f"actions_per_turn must be >= 1, got {actions_per_turn}. Fix: e.g. "
                "--actions-per-turn 1"
            )
        self.actions_per_turn, self.seed, self.tokenizer = int(actions_per_turn), seed, tokenizer

    def act(self, requests: list[TurnRequest], params: SamplingParams) -> list[PolicyOutput]:
        outputs = []
        for r in requests:
            rng = random.Random(derive_seed(self.name, self.seed, r.rng_seed))
            n = max(1, min(self.actions_per_turn, r.max_actions))
            actions, info = self.pick(r.env, n, rng)
            outputs.append(
                PolicyOutput(text=self.reply(r, actions), info={"actions": actions, **info})
            )
        return outputs

    def reply(self, request: TurnRequest, actions: list[str]) -> str:
        """A well-formed reply in the request's reasoning format: a structured thought
        states the true facts of the current state, a plan that names ``actions``, and
        the intended outcome of ``actions`` (what the reasoning rewards score as right).
        Called before any of ``actions`` runs, so the env still shows the current state."""
        fmt, env = request.reasoning, request.env
        sections = SECTIONS[fmt]
        if not sections:
            return format_reply(actions, fmt, request.separator, thought=self.thought(actions))
        return format_reply(
            actions,
            fmt,
            request.separator,
            observation=format_facts(env.state_facts()) if "observation" in sections else "",
            plan=self.plan(actions),
            prediction=format_facts(env.predict_facts(actions)) if "prediction" in sections else "",
        )

    def pick(self, env: Env, n: int, rng: random.Random) -> tuple[list[str], dict[str, Any]]:
        """``(actions, info)``: :meth:`choose`'s actions and what the output's ``info``
        should say about them."""
        return self.choose(env, n, rng), {}

    @abstractmethod
    def choose(self, env: Env, n: int, rng: random.Random) -> list[str]: ...

    def thought(self, actions: list[str]) -> str:
        return ""

    def plan(self, actions: list[str]) -> str:
        """The ``<reasoning>`` section: names the chosen actions last, in order."""
        return f"I go {', then '.join(actions)}."


def _random_action(env: Env, rng: random.Random) -> str:
    try:
        return env.random_action(rng)
    except NotImplementedError as err:
        if "Fix:" in str(err):  # the env knows the real fix (an OpenEnv server's actions)
            raise UsageError(str(err)) from None
        raise UsageError(
            f"environment {type(env).__name__} has no random_action(); the random policy "
            "(and oracle epsilon) need one. Fix: --model oracle with --epsilon 0"
        ) from None


class RandomPolicy(_ActionPolicy):
    """Uniformly random actions, ``actions_per_turn`` per turn."""

    name = "random"

    def choose(self, env: Env, n: int, rng: random.Random) -> list[str]:
        return [_random_action(env, rng) for _ in range(n)]

    def thought(self, actions: list[str]) -> str:
        return "I pick an action at random."


class OraclePolicy(_ActionPolicy):
    """The env's solver, one action per turn by default.

    ``actions_per_turn > 1`` plans several actions on a deep copy of the env (exact
    for deterministic envs; for stochastic ones the plan assumes the simulated
    outcomes). ``epsilon``: each action is replaced by a random one with that
    probability (the plan continues from the state the random action leads to).
    When the solver has no answer (``oracle_action() is None``) a random action is used.
    """

    name = "oracle"

    def __init__(
        self, actions_per_turn: int = 1, epsilon: float = 0.0, seed: int = 0, tokenizer: Any = None
    ) -> None:
        if not 0.0 <= epsilon <= 1.0:  # also NaN
            raise UsageError(
                f"epsilon (the share of oracle actions made random) must be in [0, 1], got "
                f"{epsilon}. Fix: e.g. --epsilon 0.1 (0: the oracle's own actions)"
            )
        super().__init__(actions_per_turn, seed, tokenizer)
        self.epsilon = float(epsilon)

    def pick(self, env: Env, n: int, rng: random.Random) -> tuple[list[str], dict[str, Any]]:
        """The actions and ``expert_label``: whether every one is the solver's own (no
        noise, no random fallback where the solver has no answer)."""
        sim = env if n == 1 else copy.deepcopy(env)  # never step the real env
        actions: list[str] = []
        expert = True
        for k in range(n):
            action = sim.oracle_action()
            if action is None or (self.epsilon > 0 and rng.random() < self.epsilon):
                action = _random_action(sim, rng)
                expert = False
            actions.append(str(action))
            if k + 1 < n:
                _, _, terminated, truncated, _ = sim.step(action)
                if terminated or truncated:
                    break
        return actions, {"expert_label": expert}

    def choose(self, env: Env, n: int, rng: random.Random) -> list[str]:
        return self.pick(env, n, rng)[0]

    def thought(self, actions: list[str]) -> str:
        if len(actions) == 1:
            return f"The best next action from this state is {actions[0]}."
        return f"The best next actions from this state are {', '.join(actions)}."


class RelabeledPolicy(Policy):
    """Visit states with one policy, answer them with another: DAgger's data.

    ``behavior`` (a noisy oracle, the random policy, or the learner itself) chooses the
    actions that run; ``label`` (the oracle) writes the reply that is recorded, i.e. the
    training target for the state the episode is in. So a warm start sees the states its
    own (or a noisy expert's) mistakes lead to, and is taught the expert's move there;
    a random move is never a target (Ross et al., 2011).

    The recorded reply differs from the actions that ran, so the next state follows the
    behavior's move, not the reply's: only per-turn samples that show the current state
    alone (``rollout.context_window=0``) are consistent training data, and ``ragen sft``
    refuses any other window. ``info["expert_label"]`` is False where the label policy
    had no expert answer (say, a Sokoban room the behavior made unsolvable); such turns
    are dropped from the data.
    """

    name = "relabeled"

    def __init__(self, label: Policy, behavior: Policy) -> None:
        self.label, self.behavior = label, behavior
        self.tokenizer = label.tokenizer

    def act(self, requests: list[TurnRequest], params: SamplingParams) -> list[PolicyOutput]:
        labels = self.label.act(requests, params)  # before any env moves: same states
        moves = self.behavior.act(requests, params)
        for request, label, move in zip(requests, labels, moves):
            executed = move.info.get("actions")
            if executed is None:  # a model: its reply's actions (none if malformed)
                parsed = parse_reply(move.text, request.reasoning, request.separator)
                executed = parsed.actions if parsed.format_ok else []
            label.info = {**label.info, "execute": list(executed)}
            label.info.setdefault("expert_label", True)
        return labels

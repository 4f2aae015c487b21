"""Rule-checked reasoning rewards (VAGEN-style): is the thought grounded in the state, does
it predict the next state, does it commit to the answer?

Three rewards, each a score in [0, 1] per turn (``REASONING_REWARDS``):

* ``grounding``   = ``match_score(parse_facts(observation, fact_kinds).facts, true_facts)``
  where ``observation`` is the ``<observation>`` section and ``true_facts`` is
  ``env.state_facts()`` of the state the turn was generated from;
* ``world_model`` = ``match_score(parse_facts(prediction, prediction_kinds).facts,
  predicted_truth)`` where ``predicted_truth`` is ``env.predict_facts(actions)`` taken
  from that same state, before the actions run;
* ``consistency`` = 1.0 if ``is_consistent(thought_commitment(parsed, fmt),
  parsed.actions, action_names)`` else 0.0.

``match_score(stated, truth) = |stated ∩ truth| / max(|stated|, |truth|)`` (multisets;
1.0 when both are empty). Dividing by the longer of the two charges both errors: a false
or extra fact lowers it like precision does, and an omitted fact lowers it too, so
stating one safe fact of five earns 1/5, not 1; and a repeated true fact counts once,
so it cannot be padded. A statement that does not parse (an unreadable piece, an
unknown kind) scores 0.0: the agent gets no credit for facts it did not write in the
checkable form.

``consistency`` is a suffix rule (see :func:`ragen.agent.reasoning.is_consistent`):
the answer's actions must be the last actions the thought names, in order. A plan is
read as ending in its decision, so options it weighs and discards earlier do not
count against it, and the rule stays a cheap lexical check with no model in the loop.

FrozenLake is slippery: the state after an action is random. Its ``predict_facts``
returns the *intended* outcome (the move the action asks for), so ``world_model``
rewards predicting what the action is meant to do, not guessing the slip; each env
defines its own prediction truth.

Applicability (:func:`applicable_rewards`): ``grounding`` needs an observation section
and an env with ``fact_kinds``, ``world_model`` a prediction section and ``fact_kinds``,
``consistency`` a thought (any format but ``no_think``) and a discrete action list. A
reward that does not apply is ``None`` (not logged, not added). A malformed reply scores
0.0 on every applicable reward: the format penalty already applies, and the zeros keep
a model from escaping a reward by breaking the format.

All functions are pure: the rollout passes the env's facts in, so no env object is
needed. The weighted total (:meth:`ReasoningScores.total`, weights from
``rollout.grounding_reward``, ``rollout.world_model_reward``,
``rollout.consistency_reward``) is added to the turn's reward.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ragen.envs.facts import Fact, match_score, parse_facts
from ragen.errors import ConfigError

from .parsing import ParsedResponse
from .reasoning import SECTIONS, check_format, is_consistent, thought_commitment

REASONING_REWARDS = ("grounding", "world_model", "consistency")


def check_reward_weights(weights: Mapping[str, float]) -> dict[str, float]:
    """``weights`` as a dict of floats; ValueError for an unknown reward name or a
    non-finite weight."""
    out = {}
    for name, w in weights.items():
        if name not in REASONING_REWARDS:
            raise ConfigError(
                f"unknown reasoning reward {name!r}; use {', '.join(REASONING_REWARDS)}"
            )
        w = float(w)
        if not math.isfinite(w):
            raise ConfigError(f"the weight of reasoning reward {name!r} must be finite, got {w}")
        out[name] = w
    return out


@dataclass
class ReasoningScores:
    """One turn's reasoning scores in [0, 1]; ``None`` where a reward does not apply."""

    grounding: float | None = None
    world_model: float | None = None
    consistency: float | None = None

    def as_dict(self) -> dict[str, float]:
        """The scores that apply, by reward name (e.g. for ``reward/<name>`` logs)."""
        return {n: getattr(self, n) for n in REASONING_REWARDS if getattr(self, n) is not None}

    def total(self, weights: Mapping[str, float]) -> float:
        """``sum(weights[name] * score)`` over the scores that apply; a reward missing
        from ``weights`` weighs 0, an unknown name raises ValueError."""
        w = check_reward_weights(weights)
        return sum(w.get(name, 0.0) * score for name, score in self.as_dict().items())


def applicable_rewards(
    reasoning: str, fact_kinds: Sequence[str], action_names: Sequence[str] | None
) -> tuple[str, ...]:
    """The rewards that apply to format ``reasoning`` on an env with these ``fact_kinds``
    and ``action_names`` (None or empty: free-form actions), in ``REASONING_REWARDS`` order."""
    sections = SECTIONS[check_format(reasoning)]
    out = []
    if "observation" in sections and fact_kinds:
        out.append("grounding")
    if "prediction" in sections and fact_kinds:
        out.append("world_model")
    if reasoning != "no_think" and action_names:
        out.append("consistency")
    return tuple(out)


def fact_score(statement: str, kinds: Sequence[str], truth: Sequence[Fact]) -> float:
    """``match_score`` of the facts ``statement`` states against ``truth``; 0.0 when the
    statement does not parse with ``kinds``."""
    parsed = parse_facts(statement, kinds)
    return match_score(parsed.facts, truth) if parsed.ok else 0.0


def score_turn(
    parsed: ParsedResponse,
    reasoning: str,
    *,
    true_facts: Sequence[Fact] | None = None,
    predicted_truth: Sequence[Fact] | None = None,
    fact_kinds: Sequence[str] = (),
    prediction_kinds: Sequence[str] = (),
    action_names: Sequence[str] | None = None,
) -> ReasoningScores:
    """The reasoning scores of one turn (formulas in the module docstring).

    ``parsed`` is :func:`ragen.agent.reasoning.parse_reply` of the reply under
    ``reasoning``; ``true_facts`` is ``env.state_facts()`` of the state the reply was
    generated from and ``predicted_truth`` is ``env.predict_facts(parsed.actions)`` from
    that state (the answer's actions, all of them: the prediction is about what the
    agent answered). Each is required only when its reward applies and the reply is
    well formed (ValueError otherwise).
    """
    names = applicable_rewards(reasoning, fact_kinds, action_names)
    if not parsed.format_ok:
        return ReasoningScores(**{n: 0.0 for n in names})
    missing = [s for s in SECTIONS[reasoning] if s not in parsed.sections]
    if missing:
        raise ValueError(
            f"score_turn: a well-formed {reasoning} reply has no <{missing[0]}> section; "
            "parse it with ragen.agent.reasoning.parse_reply, not parse_response"
        )
    scores: dict[str, float] = {}
    if "grounding" in names:
        if true_facts is None:
            raise ValueError("score_turn: the grounding reward needs true_facts")
        scores["grounding"] = fact_score(
            parsed.sections.get("observation", ""), fact_kinds, true_facts
        )
    if "world_model" in names:
        if predicted_truth is None:
            raise ValueError("score_turn: the world_model reward needs predicted_truth")
        scores["world_model"] = fact_score(
            parsed.sections.get("prediction", ""), prediction_kinds, predicted_truth
        )
    if "consistency" in names:
        text = thought_commitment(parsed, reasoning)
        scores["consistency"] = float(is_consistent(text, parsed.actions, action_names))
    return ReasoningScores(**scores)

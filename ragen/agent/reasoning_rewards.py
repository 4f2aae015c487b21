"""Rule-checked reasoning rewards (VAGEN-style): is the thought grounded in the state, does
it predict the next state, does it commit to the answer?

Three rewards, each a score in [0, 1] per turn (``REASONING_REWARDS``):

* ``grounding``   = ``match_score(parse_facts(observation, fact_kinds).facts, true_facts)``
  where ``observation`` is the ``<observation>`` section and ``true_facts`` is
  ``env.state_facts()`` of the state the turn was generated from;
* ``world_model`` = ``change_score(parse_facts(prediction, prediction_kinds).facts,
  before, after)``: the prediction scored on what the actions change. ``after`` is
  ``env.predict_facts(actions)`` and ``before`` is ``env.predict_facts([])`` (the same
  dynamic facts now), both taken from that state before the actions run; facts true
  both before and after are set aside (stating them neither earns nor costs), and what
  is left of the prediction is matched against the facts that change;
* ``consistency`` = 1.0 if the thought commits to exactly the answer's actions, else
  0.0: a structured format's ``<reasoning>`` plan must end with the answer's actions
  and name no other action (:func:`plan_matches`); a ``free_think`` thought must name
  the answer's actions last (:func:`ragen.agent.reasoning.is_consistent`).

**No credit for a turn that changes nothing.** When the answer's actions would leave
the state as it is (``after == before``: a wall bump, a word that is no action, an
empty answer), every applicable reward scores 0.0: such a turn can be repeated at no
cost, so paying it would make stalling a way to earn. **No grounding credit where the
observation already states the facts** (``observation_states_facts``, e.g. an env's
``coord`` or ``grid_coord`` observation format): copying them is not reasoning, so the
reward does not apply there. Tests replay each exploit (``tests/test_reasoning_exploits.py``).

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
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ragen.envs.facts import Fact, match_score, parse_facts
from ragen.errors import ConfigError

from .reasoning import (
    SECTIONS,
    ParsedResponse,
    check_format,
    committed_actions,
    is_consistent,
    is_structured,
    thought_commitment,
)

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
    reasoning: str,
    fact_kinds: Sequence[str],
    action_names: Sequence[str] | None,
    observation_states_facts: bool = False,
) -> tuple[str, ...]:
    """The rewards that apply to format ``reasoning`` on an env with these ``fact_kinds``
    and ``action_names`` (None or empty: free-form actions), in ``REASONING_REWARDS`` order.
    ``observation_states_facts``: the observation already lists the facts (grounding
    would be copying them, so it does not apply)."""
    sections = SECTIONS[check_format(reasoning)]
    out = []
    if "observation" in sections and fact_kinds and not observation_states_facts:
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


def change_score(stated: Sequence[Fact], before: Sequence[Fact], after: Sequence[Fact]) -> float:
    """A predicted next state scored on what changes, in [0, 1]:
    ``match_score(stated - kept, after - before)`` with ``kept = before ∩ after`` (multisets).

    Facts that hold both before and after are set aside: stating them earns nothing and
    costs nothing, so copying the current state into a prediction scores 0 (its stale
    facts are wrong and it states none of the changes), while a prediction of the whole
    next state scores 1. 0.0 when nothing changes (no information to predict).
    """
    before_c, after_c = Counter(before), Counter(after)
    changed = after_c - before_c
    if not changed:
        return 0.0
    claimed = Counter(stated) - (before_c & after_c)
    return match_score(list(claimed.elements()), list(changed.elements()))


def plan_matches(plan: str, actions: Sequence[str], action_names: Sequence[str] | None) -> bool:
    """Whether the plan ``plan`` commits to the answer's ``actions`` and to nothing else:
    it ends by naming them in order (:func:`~ragen.agent.reasoning.is_consistent`) and
    names no action outside the answer. The plan section is the decision, so, unlike a
    free thought, it may not weigh other moves: "up, down, left, right ... up" is not a
    plan for "up", while "Pushing the box left is best: left." is a plan for "left".
    False for an empty answer."""
    named = committed_actions(plan, action_names)
    wanted = {a.strip().lower() for a in actions}
    return is_consistent(plan, actions, action_names) and set(named) <= wanted


def score_turn(
    parsed: ParsedResponse,
    reasoning: str,
    *,
    true_facts: Sequence[Fact] | None = None,
    predicted_truth: Sequence[Fact] | None = None,
    facts_before: Sequence[Fact] | None = None,
    fact_kinds: Sequence[str] = (),
    prediction_kinds: Sequence[str] = (),
    action_names: Sequence[str] | None = None,
    observation_states_facts: bool = False,
) -> ReasoningScores:
    """The reasoning scores of one turn (formulas in the module docstring).

    ``parsed`` is :func:`ragen.agent.reasoning.parse_reply` of the reply under
    ``reasoning``; ``true_facts`` is ``env.state_facts()`` of the state the reply was
    generated from, ``predicted_truth`` is ``env.predict_facts(parsed.actions)`` from
    that state (the answer's actions, all of them: the prediction is about what the
    agent answered) and ``facts_before`` is ``env.predict_facts([])`` (the dynamic facts
    as they are). Each is required only when its reward applies and the reply is well
    formed (ValueError otherwise). Without ``facts_before`` no turn counts as a no-op and
    the prediction is matched against the whole ``predicted_truth`` (the old rule, kept
    for callers that cannot ask the env).
    """
    names = applicable_rewards(reasoning, fact_kinds, action_names, observation_states_facts)
    if not parsed.format_ok:
        return ReasoningScores(**{n: 0.0 for n in names})
    if names and facts_before is not None and predicted_truth is not None:
        if not parsed.actions or Counter(facts_before) == Counter(predicted_truth):
            return ReasoningScores(**{n: 0.0 for n in names})  # changes nothing: no credit
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
        prediction = parse_facts(parsed.sections.get("prediction", ""), prediction_kinds)
        if not prediction.ok:
            scores["world_model"] = 0.0
        elif facts_before is None:
            scores["world_model"] = match_score(prediction.facts, predicted_truth)
        else:
            scores["world_model"] = change_score(prediction.facts, facts_before, predicted_truth)
    if "consistency" in names:
        text = thought_commitment(parsed, reasoning)
        if is_structured(reasoning):  # the plan section is the decision: all of it counts
            ok = plan_matches(text, parsed.actions, action_names)
        else:
            ok = is_consistent(text, parsed.actions, action_names)
        scores["consistency"] = float(ok)
    return ReasoningScores(**scores)

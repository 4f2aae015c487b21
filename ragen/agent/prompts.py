"""The text of the system and per-turn user messages the policy sees.

System message = the environment's ``instructions`` + the response format.
User message of turn t (0-based) of ``max_turns``::

    Turn 2 of 5:
    Reward of your last turn: -0.1        <- from turn 2 on
    State:
    <observation text>
    You have 8 actions left (at most 5 this turn).
    Reply as <think>...</think><answer>...</answer> ...

Both budgets (turns and actions left) are in every user message: they are part of the
state the policy sees, so an episode that ends by running out of them ends at a state
that shows it (``budget_is_terminal`` may treat it as terminal).

Kept deliberately plain: the wording is part of the training distribution, so it
changes only together with a version bump in ``PROMPT_VERSION``.

Two styles:

* ``full`` (default): the environment's whole ``instructions`` (rules, legend, actions).
* ``compact``: only the action vocabulary and the response format, and a shorter user
  message. For small models trained from scratch, which cannot read the rules anyway:
  it cuts the prompt (and so the cost of every rollout and update) by about half.
"""

from __future__ import annotations

from ragen.errors import ConfigError

from .reasoning import SECTIONS, compact_reply_shape, format_guide, reply_shape

PROMPT_VERSION = 2  # 2: the turn header shows max_turns
PROMPT_STYLES = ("full", "compact")


def _check_style(style: str) -> None:
    if style not in PROMPT_STYLES:
        raise ConfigError(f"unknown prompt style {style!r}; use one of {', '.join(PROMPT_STYLES)}")


def format_instructions(
    reasoning: str = "free_think",
    separator: str = "||",
    max_actions_per_turn: int = 5,
    fact_kinds: tuple[str, ...] = (),
    prediction_kinds: tuple[str, ...] = (),
) -> str:
    """How the policy must format its reply (a paragraph of the system message); the
    structured reasoning formats add what goes into each section of the thought."""
    many = (
        f"You may give up to {max_actions_per_turn} actions in one answer, separated by "
        f'"{separator}"; they are executed in order.'
        if max_actions_per_turn > 1
        else "Give exactly one action in the answer."
    )
    # no_think and free_think keep PROMPT_VERSION 2's wording byte for byte (reply_shape)
    shape = reply_shape(reasoning, separator)
    text = f"Respond in exactly this format and nothing else:\n{shape}\n{many}"
    guide = format_guide(reasoning, fact_kinds, prediction_kinds)
    return f"{text}\n{guide}" if guide else text


def system_message(
    instructions: str,
    reasoning: str = "free_think",
    separator: str = "||",
    max_actions_per_turn: int = 5,
    style: str = "full",
    action_names: list[str] | None = None,
    fact_kinds: tuple[str, ...] = (),
    prediction_kinds: tuple[str, ...] = (),
) -> str:
    """Environment rules followed by the response format (``style="compact"``: the
    action vocabulary instead of the rules, when the env has a discrete one).

    ``reasoning`` is one of :data:`ragen.agent.reasoning.REASONING_FORMATS`;
    ``fact_kinds``/``prediction_kinds`` (the env's) name what a grounded thought and a
    prediction state.
    """
    _check_style(style)
    if style == "compact":
        actions = f"Actions: {', '.join(action_names)}. " if action_names else ""
        text = (
            f"{actions}Reply {compact_reply_shape(reasoning)}, at most "
            f"{max_actions_per_turn} actions joined by {separator}."
        )
        kinds = _compact_kinds(reasoning, fact_kinds, prediction_kinds)
        return f"{text} {kinds}" if kinds else text
    rules = instructions.strip()
    fmt = format_instructions(
        reasoning, separator, max_actions_per_turn, fact_kinds, prediction_kinds
    )
    return f"{rules}\n\n{fmt}" if rules else fmt


def _compact_kinds(
    reasoning: str, fact_kinds: tuple[str, ...], prediction_kinds: tuple[str, ...]
) -> str:
    """The compact prompt's one-line reminder of what the fact sections hold."""
    sections = SECTIONS[reasoning]
    parts = []
    if "observation" in sections:
        parts.append(f"observation: {', '.join(fact_kinds)} as kind (row,col)")
    if "prediction" in sections:
        parts.append(f"prediction: {', '.join(prediction_kinds)} after your actions")
    return "; ".join(parts) + "." if parts else ""


def user_message(
    turn: int,
    observation: str,
    actions_left: int,
    max_actions_per_turn: int,
    previous_reward: float | None = None,
    reasoning: str = "free_think",
    *,
    max_turns: int,
    style: str = "full",
) -> str:
    """The user message opening turn ``turn`` (0-based; shown 1-based) of ``max_turns``:
    "Turn 2 of 5" (full) or "Turn 2/5, 8 actions left" (compact)."""
    _check_style(style)
    if not 0 <= turn < max_turns:
        raise ValueError(f"turn {turn} (0-based) is outside max_turns={max_turns}")
    if style == "compact":
        head = f"Turn {turn + 1}/{max_turns}, {actions_left} actions left"
        if previous_reward is not None:
            head += f", last reward {previous_reward:g}"
        return f"{head}:\n{observation.rstrip()}"
    lines = [f"Turn {turn + 1} of {max_turns}:"]
    if previous_reward is not None:
        lines.append(f"Reward of your last turn: {previous_reward:g}")
    lines.append("State:")
    lines.append(observation.rstrip())
    per_turn = min(actions_left, max_actions_per_turn)
    lines.append(f"You have {actions_left} actions left (at most {per_turn} this turn).")
    lines.append(f"Reply as {compact_reply_shape(reasoning)} with nothing else.")
    return "\n".join(lines)

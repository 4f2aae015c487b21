"""The text of the system and per-turn user messages the policy sees.

System message = the environment's ``instructions`` + the response format.
User message of turn t (0-based)::

    Turn 1:
    Reward of your last turn: -0.1        <- from turn 2 on
    State:
    <observation text>
    You have 8 actions left (at most 5 per turn).
    Reply as <think>...</think><answer>...</answer> ...

Kept deliberately plain: the wording is part of the training distribution, so it
changes only together with a version bump in ``PROMPT_VERSION``.
"""

from __future__ import annotations

PROMPT_VERSION = 1


def format_instructions(
    think: bool = True, separator: str = "||", max_actions_per_turn: int = 5
) -> str:
    """How the policy must format its reply (a paragraph of the system message)."""
    many = (
        f"You may give up to {max_actions_per_turn} actions in one answer, separated by "
        f'"{separator}"; they are executed in order.'
        if max_actions_per_turn > 1
        else "Give exactly one action in the answer."
    )
    if think:
        shape = (
            "Respond in exactly this format and nothing else:\n"
            f"<think>your reasoning</think><answer>action1 {separator} action2</answer>"
        )
    else:
        shape = (
            "Respond in exactly this format and nothing else:\n"
            f"<answer>action1 {separator} action2</answer>"
        )
    return f"{shape}\n{many}"


def system_message(
    instructions: str, think: bool = True, separator: str = "||", max_actions_per_turn: int = 5
) -> str:
    """Environment rules followed by the response format."""
    rules = instructions.strip()
    fmt = format_instructions(think, separator, max_actions_per_turn)
    return f"{rules}\n\n{fmt}" if rules else fmt


def user_message(
    turn: int,
    observation: str,
    actions_left: int,
    max_actions_per_turn: int,
    previous_reward: float | None = None,
    think: bool = True,
) -> str:
    """The user message opening turn ``turn`` (0-based; shown 1-based)."""
    lines = [f"Turn {turn + 1}:"]
    if previous_reward is not None:
        lines.append(f"Reward of your last turn: {previous_reward:g}")
    lines.append("State:")
    lines.append(observation.rstrip())
    per_turn = min(actions_left, max_actions_per_turn)
    lines.append(f"You have {actions_left} actions left (at most {per_turn} this turn).")
    reminder = "<think>...</think><answer>...</answer>" if think else "<answer>...</answer>"
    lines.append(f"Reply as {reminder} with nothing else.")
    return "\n".join(lines)

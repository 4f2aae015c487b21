"""Reasoning formats of an agent's reply: strict parsing, canonical replies, prompt text,
and the thought/answer consistency rule.

Five formats (``REASONING_FORMATS``); the structured ones split the think block into
sections (``SECTIONS``)::

    no_think                  <answer>A</answer>
    free_think                <think>T</think><answer>A</answer>
    grounding                 <think><observation>F</observation><reasoning>R</reasoning></think><answer>A</answer>
    world_modeling            <think><reasoning>R</reasoning><prediction>P</prediction></think><answer>A</answer>
    grounding_world_modeling  <think><observation>F</observation><reasoning>R</reasoning><prediction>P</prediction></think><answer>A</answer>

``F`` states the facts of the current state, ``P`` the facts after the answer's actions
(both as ``kind (row,col); ...``, see :mod:`ragen.envs.facts`), ``R`` is a short plan
that names the chosen action(s) last, ``A`` is ``a1 || a2``.

Well-formed (:func:`parse_reply`) means: the outer rules of
:func:`parse_response` (below) (``no_think`` = ``think=False``,
every other format = ``think=True``), and for a structured format also, inside the
think block:

1. no tag (``<x>`` or ``</x>``) of a section the format does not have;
2. each tag of the format's sections exactly once;
3. the sections in the format's order, none nested in another;
4. only whitespace before, between and after the sections;
5. every section non-empty after stripping;

and no section tag at all inside the answer. Tags are literal and lower case. Whether
the stated facts are readable or true is not a format rule: that is what the reasoning
rewards (:mod:`ragen.agent.reasoning_rewards`) score. ``no_think`` and ``free_think``
are exactly the old ``think=False`` / ``think=True`` parses (a free thought may contain
anything, section tags included). A malformed reply has ``format_ok=False``, no
actions (a malformed turn executes nothing), no ``sections`` and an ``error`` naming
the rule and the section.

**The outer grammar** (:func:`parse_response`, the rules every format starts from).

Response format (``think=True``)::

    <think> free-form reasoning </think> <answer> a1 || a2 || a3 </answer>

and with ``think=False`` the answer block alone: ``<answer> a1 || a2 </answer>``.

A response is **well formed** (``format_ok``) exactly when all of these hold:

0. it is clean text: no U+FFFD replacement character (what decoding invalid UTF-8
   bytes yields) and no lone surrogate (which cannot even be written as UTF-8; callers
   store replies through :func:`clean_text`, which turns those into U+FFFD);
1. each tag of the mode appears exactly once: ``<think>``, ``</think>``, ``<answer>``,
   ``</answer>`` (``think=True``) or ``<answer>``, ``</answer>`` (``think=False``; any
   think tag is then an error);
2. they appear in the order ``<think>`` ``</think>`` ``<answer>`` ``</answer>``, so no
   block is nested in another and the think block comes first;
3. only whitespace precedes the first tag, separates the two blocks and follows the
   last tag;
4. the answer holds at least one action after splitting on ``separator``, stripping
   each piece and dropping empty pieces.

Tags are matched literally (lower case, no attributes). Everything else (what the
thought says, how many actions there are, whether the env knows them) is left to
the caller: the rollout clips actions to its budgets and the env judges validity.

A malformed response still yields its best-effort ``thought`` (text of the first
think block, if any) but never any ``actions``: a badly formatted turn executes
nothing. ``error`` names the first rule that failed, for logs and the viewer.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ragen.errors import ConfigError

# -- the outer grammar: a thought and a list of actions ---------------------------------
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
_ALL_TAGS = (THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE)
REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` with every surrogate code point replaced by U+FFFD, so that it encodes
    to UTF-8 (a file, JSON with ``ensure_ascii=False``, a tokenizer); other text is
    returned unchanged. :func:`parse_response` treats U+FFFD as a format error."""
    return _SURROGATE.sub(REPLACEMENT, text)


@dataclass
class ParsedResponse:
    thought: str  # stripped think-block text ("" without one)
    actions: list[str] = field(default_factory=list)  # stripped, empties dropped
    format_ok: bool = False
    error: str = ""  # "" when format_ok, else the first violated rule
    # the stripped text of each section of a structured thought (``<observation>``,
    # ``<reasoning>``, ``<prediction>``), filled by ``ragen.agent.reasoning.parse_reply``
    # for a well-formed reply; empty otherwise (and always for ``parse_response``)
    sections: dict[str, str] = field(default_factory=dict)


def split_actions(answer: str, separator: str = "||") -> list[str]:
    """Split an answer body on ``separator``; strip each action and drop empty ones."""
    if not separator:
        raise ConfigError("the action separator must be a non-empty string, e.g. '||'")
    return [part.strip() for part in answer.split(separator) if part.strip()]


def parse_response(text: str, think: bool = True, separator: str = "||") -> ParsedResponse:
    """Parse ``text`` under the strict format described in the module docstring.

    >>> parse_response("<think>go left</think><answer>Left || Up</answer>")
    ParsedResponse(thought='go left', actions=['Left', 'Up'], format_ok=True, error='', sections={})

    The structured thoughts of the reasoning formats (``<observation>``, ``<reasoning>``,
    ``<prediction>`` inside the think block) are checked on top of this by
    :func:`ragen.agent.reasoning.parse_reply`.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_response expects a str, got {type(text).__name__}")
    counts = {tag: text.count(tag) for tag in _ALL_TAGS}
    thought = _first_block(text, THINK_OPEN, THINK_CLOSE)

    def bad(error: str) -> ParsedResponse:
        return ParsedResponse(thought=thought, actions=[], format_ok=False, error=error)

    if not text.strip():
        return bad("empty response")
    if REPLACEMENT in text or _SURROGATE.search(text):
        return bad("undecodable text (U+FFFD or a lone surrogate)")
    wanted = _ALL_TAGS if think else (ANSWER_OPEN, ANSWER_CLOSE)
    for tag in _ALL_TAGS:
        n = counts[tag]
        if tag in wanted and n == 0:
            return bad(f"missing {tag}")
        if tag in wanted and n > 1:
            return bad(f"{tag} appears {n} times")
        if tag not in wanted and n > 0:
            return bad(f"unexpected {tag} (think=False)")

    positions = [text.index(tag) for tag in wanted]
    if positions != sorted(positions):
        return bad("tags out of order or nested")

    # Rule 3: only whitespace outside the blocks. Cut the text at the tags and check
    # the pieces that lie outside a block (before, between, after).
    if think:
        before, rest = text.split(THINK_OPEN, 1)
        thought_body, rest = rest.split(THINK_CLOSE, 1)
        between, rest = rest.split(ANSWER_OPEN, 1)
        answer_body, after = rest.split(ANSWER_CLOSE, 1)
        outside = (before, between, after)
    else:
        before, rest = text.split(ANSWER_OPEN, 1)
        answer_body, after = rest.split(ANSWER_CLOSE, 1)
        thought_body, outside = "", (before, after)
    if any(piece.strip() for piece in outside):
        return bad("text outside the tags")

    actions = split_actions(answer_body, separator)
    if not actions:
        return bad("empty answer")
    return ParsedResponse(thought=thought_body.strip(), actions=actions, format_ok=True)


def _first_block(text: str, open_tag: str, close_tag: str) -> str:
    """Text between the first ``open_tag`` and the next ``close_tag`` ("" if absent)."""
    start = text.find(open_tag)
    if start < 0:
        return ""
    start += len(open_tag)
    end = text.find(close_tag, start)
    return text[start:end].strip() if end >= 0 else ""


def format_response(
    actions: list[str], thought: str = "", think: bool = True, separator: str = "||"
) -> str:
    """The canonical well-formed response for ``actions`` (used by text policies).

    ``parse_response(format_response(a, t)).actions == a`` for actions that contain
    neither the separator nor a tag.
    """
    answer = f"{ANSWER_OPEN}{f' {separator} '.join(actions)}{ANSWER_CLOSE}"
    if not think:
        return answer
    return f"{THINK_OPEN}{thought}{THINK_CLOSE}{answer}"


# -- the reasoning formats --------------------------------------------------------------
REASONING_FORMATS = (
    "no_think",
    "free_think",
    "grounding",
    "world_modeling",
    "grounding_world_modeling",
)
#: the sections of each format's thought, in the order they must appear
SECTIONS: dict[str, tuple[str, ...]] = {
    "no_think": (),
    "free_think": (),
    "grounding": ("observation", "reasoning"),
    "world_modeling": ("reasoning", "prediction"),
    "grounding_world_modeling": ("observation", "reasoning", "prediction"),
}
ALL_SECTIONS = ("observation", "reasoning", "prediction")
#: sections whose text is a fact statement (they need an env with ``fact_kinds``)
FACT_SECTIONS = ("observation", "prediction")


def check_format(fmt: str) -> str:
    """``fmt`` if it is one of ``REASONING_FORMATS``, else ValueError naming the choices."""
    if fmt not in REASONING_FORMATS:
        raise ConfigError(
            f"unknown reasoning format {fmt!r}; use one of {', '.join(REASONING_FORMATS)}"
        )
    return fmt


def has_think(fmt: str) -> bool:
    """Whether replies of ``fmt`` have a think block (every format but ``no_think``)."""
    return check_format(fmt) != "no_think"


def is_structured(fmt: str) -> bool:
    """Whether ``fmt`` splits the thought into sections."""
    return bool(SECTIONS[check_format(fmt)])


def needs_facts(fmt: str) -> bool:
    """Whether ``fmt`` has an observation or prediction section, and so needs an env with
    a state checker (``Env.fact_kinds``)."""
    return any(s in FACT_SECTIONS for s in SECTIONS[check_format(fmt)])


def check_env_supports(fmt: str, fact_kinds: Sequence[str], env_name: str = "") -> None:
    """:class:`~ragen.errors.ConfigError` (a ValueError) naming ``rollout.reasoning`` and
    the fix when ``fmt`` needs facts and the env has no ``fact_kinds``."""
    if needs_facts(fmt) and not fact_kinds:
        env = f"environment {env_name!r}" if env_name else "this environment"
        raise ConfigError(
            f"rollout.reasoning={fmt}: {env} has no state checker (Env.fact_kinds), so "
            "its observations and predictions cannot be checked. Fix: use "
            "rollout.reasoning=free_think or no_think, or a grid env (frozen_lake, "
            "sokoban and their variants)"
        )


# -- parsing -------------------------------------------------------------------------------


def _open(section: str) -> str:
    return f"<{section}>"


def _close(section: str) -> str:
    return f"</{section}>"


def parse_reply(text: str, reasoning: str, separator: str = "||") -> ParsedResponse:
    """Parse ``text`` under the format ``reasoning`` (rules in the module docstring).

    >>> r = parse_reply("<think><observation>player (1,1)</observation>"
    ...                 "<reasoning>go right</reasoning></think><answer>right</answer>",
    ...                 "grounding")
    >>> r.format_ok, r.actions, r.sections["observation"]
    (True, ['right'], 'player (1,1)')
    """
    check_format(reasoning)
    parsed = parse_response(text, think=has_think(reasoning), separator=separator)
    sections = SECTIONS[reasoning]
    if not parsed.format_ok or not sections:
        return parsed

    def bad(error: str) -> ParsedResponse:
        return ParsedResponse(thought=parsed.thought, actions=[], format_ok=False, error=error)

    # the outer parse succeeded, so the think and answer blocks are exactly these
    body = text.split("<think>", 1)[1].split("</think>", 1)[0]
    answer = text.split("<answer>", 1)[1].split("</answer>", 1)[0]
    got, error = _parse_sections(body, reasoning)
    if error:
        return bad(error)
    stray = _first_tag(answer, ALL_SECTIONS)
    if stray:
        return bad(f"unexpected {stray} in the answer (format {reasoning})")
    return ParsedResponse(
        thought=parsed.thought, actions=parsed.actions, format_ok=True, sections=got
    )


def _first_tag(text: str, sections: Sequence[str]) -> str:
    """The earliest open/close tag of ``sections`` in ``text`` ("" if none)."""
    found = [
        (text.find(tag), tag) for s in sections for tag in (_open(s), _close(s)) if tag in text
    ]
    return min(found)[1] if found else ""


def _parse_sections(body: str, fmt: str) -> tuple[dict[str, str], str]:
    """The stripped sections of a structured thought ``body``, or an error."""
    wanted = SECTIONS[fmt]
    where = f"in the thought (format {fmt})"
    foreign = _first_tag(body, [s for s in ALL_SECTIONS if s not in wanted])
    if foreign:
        return {}, f"unexpected {foreign} {where}"
    tags = [tag for s in wanted for tag in (_open(s), _close(s))]
    for tag in tags:
        n = body.count(tag)
        if n == 0:
            return {}, f"missing {tag} {where}"
        if n > 1:
            return {}, f"{tag} appears {n} times {where}"
    positions = [body.index(tag) for tag in tags]
    for i in range(1, len(tags)):
        if positions[i] < positions[i - 1]:
            section = wanted[i // 2]
            order = ", ".join(wanted)
            return {}, f"<{section}> out of order or nested {where}; the order is {order}"
    # cut the body at the tags: pieces 0, 2, 4, ... lie outside the sections
    pieces, rest = [], body
    for tag in tags:
        piece, rest = rest.split(tag, 1)
        pieces.append(piece)
    pieces.append(rest)
    for k in range(0, len(pieces), 2):
        if pieces[k].strip():
            if k == 0:
                place = f"before {tags[0]}"
            elif k == len(pieces) - 1:
                place = f"after {tags[-1]}"
            else:
                place = f"between {tags[k - 1]} and {tags[k]}"
            return {}, f"text outside the sections {where} ({place})"
    got = {s: pieces[2 * i + 1].strip() for i, s in enumerate(wanted)}
    for s in wanted:
        if not got[s]:
            return {}, f"empty <{s}> section {where}"
    return got, ""


# -- canonical replies ----------------------------------------------------------------------


def format_reply(
    actions: Sequence[str],
    reasoning: str,
    separator: str = "||",
    *,
    thought: str = "",
    observation: str = "",
    plan: str = "",
    prediction: str = "",
) -> str:
    """The canonical well-formed reply of format ``reasoning`` for ``actions``.

    ``free_think`` writes ``thought``; the structured formats write ``observation``,
    ``plan`` (the ``<reasoning>`` section) and ``prediction``, each only if the format
    has that section (so a policy may compute all three and let the format choose);
    ``no_think`` writes the answer alone. A structured format with an empty section it
    needs raises ValueError (the reply would be malformed).
    ``parse_reply(format_reply(a, f, ...), f).actions == list(a)`` for texts and actions
    that contain no tag and no separator.
    """
    check_format(reasoning)
    answer = f"<answer>{f' {separator} '.join(actions)}</answer>"
    if reasoning == "no_think":
        return answer
    if reasoning == "free_think":
        return f"<think>{thought}</think>{answer}"
    texts = {"observation": observation, "reasoning": plan, "prediction": prediction}
    parts = []
    for s in SECTIONS[reasoning]:
        if not texts[s].strip():
            arg = "plan" if s == "reasoning" else s
            raise ValueError(f"format_reply: format {reasoning!r} needs a non-empty {arg}")
        parts.append(f"{_open(s)}{texts[s].strip()}{_close(s)}")
    return f"<think>{''.join(parts)}</think>{answer}"


# -- prompt text ---------------------------------------------------------------------------

_PLACEHOLDER = {
    "observation": "the facts of the current state",
    "reasoning": "your plan",
    "prediction": "the facts after your actions",
}


def reply_shape(reasoning: str, separator: str = "||") -> str:
    """The reply shape for the system prompt, one line with placeholders, e.g.
    ``<think><observation>the facts of the current state</observation><reasoning>your
    plan</reasoning></think><answer>action1 || action2</answer>``. ``free_think`` and
    ``no_think`` give the shapes the prompt used before the reasoning formats."""
    check_format(reasoning)
    answer = f"<answer>action1 {separator} action2</answer>"
    if reasoning == "no_think":
        return answer
    if reasoning == "free_think":
        return f"<think>your reasoning</think>{answer}"
    inner = "".join(f"{_open(s)}{_PLACEHOLDER[s]}{_close(s)}" for s in SECTIONS[reasoning])
    return f"<think>{inner}</think>{answer}"


def compact_reply_shape(reasoning: str) -> str:
    """The shortest reply shape (compact prompt style, per-turn reminder), e.g.
    ``<think><observation>...</observation><reasoning>...</reasoning></think><answer>...</answer>``;
    ``<think>...</think><answer>...</answer>`` for ``free_think``."""
    check_format(reasoning)
    if reasoning == "no_think":
        return "<answer>...</answer>"
    if reasoning == "free_think":
        return "<think>...</think><answer>...</answer>"
    inner = "".join(f"{_open(s)}...{_close(s)}" for s in SECTIONS[reasoning])
    return f"<think>{inner}</think><answer>...</answer>"


def _example(kinds: Sequence[str]) -> str:
    cells = ((2, 3), (3, 3))
    return "; ".join(f"{k} ({r},{c})" for k, (r, c) in zip(kinds[:2], cells))


def format_guide(
    reasoning: str, fact_kinds: Sequence[str] = (), prediction_kinds: Sequence[str] = ()
) -> str:
    """What goes into each section of a structured thought: a short paragraph for the
    system prompt ("" for ``no_think`` and ``free_think``). ValueError when the format
    states facts and the kinds it needs are empty."""
    check_format(reasoning)
    sections = SECTIONS[reasoning]
    if not sections:
        return ""
    check_env_supports(reasoning, fact_kinds)
    if "prediction" in sections and not prediction_kinds:
        raise ValueError(f"reasoning format {reasoning!r} needs prediction_kinds")
    form = (
        'each as kind (row,col), joined by "; " (rows and columns count from 0 at the '
        "top-left cell), e.g. {example}"
    )
    lines = []
    if "observation" in sections:
        lines.append(
            "In <observation>, state every object of the current state of the kinds "
            f"{', '.join(fact_kinds)}, {form.format(example=_example(fact_kinds))}."
        )
    lines.append(
        "In <reasoning>, give a short plan that names your chosen action(s) last, "
        "in the order you give them."
    )
    if "prediction" in sections:
        same = (
            "in the same form"
            if "observation" in sections
            else form.format(example=_example(prediction_kinds))
        )
        lines.append(
            f"In <prediction>, state every object of the kinds {', '.join(prediction_kinds)} "
            f"after your actions, {same}."
        )
    return " ".join(lines)


# -- thought / answer consistency ----------------------------------------------------------


def _norm(action: str) -> str:
    return " ".join(str(action).lower().split())


@functools.lru_cache(maxsize=64)
def _action_pattern(names: tuple[str, ...]) -> re.Pattern[str] | None:
    words = sorted({_norm(n) for n in names if _norm(n)}, key=len, reverse=True)
    if not words:
        return None
    alternatives = "|".join(r"\s+".join(re.escape(w) for w in name.split()) for name in words)
    return re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE)


def committed_actions(text: str, action_names: Sequence[str] | None) -> list[str]:
    """The env's action names mentioned in ``text``, in order of mention, lower-cased.

    Names match as whole words, case-insensitively (``"upward"`` is not ``"up"``; a
    multi-word name may span any whitespace; a longer name wins over a name it
    contains). ``[]`` when the env has no discrete action list.

    >>> committed_actions("Up is a wall. The best next action from this state is right.",
    ...                   ["up", "down", "left", "right"])
    ['up', 'right']
    """
    pattern = _action_pattern(tuple(action_names or ()))
    if pattern is None or not text:
        return []
    return [_norm(m.group(0)) for m in pattern.finditer(text)]


def thought_commitment(parsed: ParsedResponse, reasoning: str) -> str:
    """The part of the thought that commits to the actions: the ``<reasoning>`` section of
    a structured format, the whole thought of ``free_think``, "" for ``no_think``."""
    check_format(reasoning)
    if reasoning == "no_think":
        return ""
    if is_structured(reasoning):
        return parsed.sections.get("reasoning", "")
    return parsed.thought


def is_consistent(text: str, actions: Sequence[str], action_names: Sequence[str] | None) -> bool:
    """Whether the thought ``text`` commits to the answer's ``actions``.

    Rule: the answer's actions, lower-cased, equal the *last* ``len(actions)`` actions the
    text mentions (:func:`committed_actions`), i.e. the thought names the answer's
    actions last, in order. A plan is read as ending with its decision, so "Up is a
    wall. The best next action from this state is right." commits to ``right``, and
    discarded options named earlier do not count against it; "I go right, not up"
    commits to ``up`` (the rule is lexical, not a reading of negation). False when
    the text names no action or the answer is empty.
    """
    wanted = [_norm(a) for a in actions]
    named = committed_actions(text, action_names)
    if not wanted or not named or len(wanted) > len(named):
        return False
    return named[-len(wanted) :] == wanted

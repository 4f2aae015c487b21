"""Strict parsing of a policy response into a thought and a list of actions.

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

import re
from dataclasses import dataclass, field

from ragen.errors import ConfigError

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

"""How the agent's thoughts change over training: the signs of a collapsing "echo trap".

Per step, over the thoughts of its turns (empty thoughts, e.g. ``no_think`` or a malformed
reply, are left out):

* ``top_thought_share``: the share of the most common thought once the action words are
  masked (:func:`mask_actions`), so "I go up" and "I go left" count as one template. 1.0
  means every thought is the same sentence.
* ``distinct_2``: distinct word bigrams / all word bigrams over the step's thoughts
  (the "distinct-n" diversity measure); low values mean repeated phrasing.
* ``thought_words``: mean thought length in words.
* ``mismatch_rate``: among well-formed turns whose thought names at least one of the env's
  actions and whose answer has actions, the share where the thought does not commit to
  the answer (:func:`ragen.agent.reasoning.is_consistent`: the actions the thought names
  last are not the answer's). Turns whose thought names no action are not judged.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from ragen.agent.reasoning import committed_actions

ACTION_MASK = "<act>"
_WORD = re.compile(r"[\w<>']+")


def mask_actions(thought: str, action_names: Sequence[str] | None) -> str:
    """``thought`` lower-cased, whitespace-normalized, each action name replaced by
    :data:`ACTION_MASK`.

    >>> mask_actions("Box left of me, so  Left.", ["left", "right"])
    'box <act> of me, so <act>.'
    """
    text = " ".join(thought.lower().split())
    pattern = _mask_pattern(tuple(action_names or ()))
    return pattern.sub(ACTION_MASK, text) if pattern is not None else text


@functools.lru_cache(maxsize=64)
def _mask_pattern(names: tuple[str, ...]) -> re.Pattern[str] | None:
    words = sorted({" ".join(n.lower().split()) for n in names if n.strip()}, key=len)
    if not words:
        return None
    alternatives = "|".join(re.escape(w) for w in reversed(words))  # longer names first
    return re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)")


def top_thought_share(thoughts: Sequence[str], action_names: Sequence[str] | None) -> float:
    """Share of the most common masked thought among non-empty ``thoughts`` (0.0: none)."""
    masked = [mask_actions(t, action_names) for t in thoughts if t.strip()]
    if not masked:
        return 0.0
    return Counter(masked).most_common(1)[0][1] / len(masked)


def distinct_n(thoughts: Iterable[str], n: int = 2) -> float:
    """Distinct word n-grams / all word n-grams over ``thoughts`` (0.0 when none)."""
    seen: set[tuple[str, ...]] = set()
    total = 0
    for t in thoughts:
        words = _WORD.findall(t.lower())
        if len(words) < n:
            continue
        total += len(words) - n + 1
        seen.update(zip(*(words[i:] for i in range(n))))  # the n-grams, without slicing each
    return len(seen) / total if total else 0.0


def mean_words(thoughts: Sequence[str]) -> float:
    """Mean length in words of the non-empty ``thoughts`` (0.0: none)."""
    lengths = [len(t.split()) for t in thoughts if t.strip()]
    return sum(lengths) / len(lengths) if lengths else 0.0


def is_mismatch(
    thought: str, actions: Sequence[str], action_names: Sequence[str] | None
) -> bool | None:
    """True when the thought names actions but does not commit to the answer's
    ``actions`` (``not is_consistent(...)``); None when not judged (no action named in
    the thought, or no answer)."""
    if not thought or not actions:
        return None
    named = committed_actions(thought, action_names)
    if not named:
        return None
    # is_consistent's rule, without matching the thought a second time
    wanted = [" ".join(str(a).lower().split()) for a in actions]
    return len(wanted) > len(named) or named[-len(wanted) :] != wanted


def mismatches(
    episodes: Sequence[dict[str, Any]], action_names: Sequence[str] | None
) -> list[list[bool | None]]:
    """:func:`is_mismatch` of every turn of every episode (malformed turns: None)."""
    cache: dict[tuple[str, tuple[str, ...]], bool | None] = {}
    out = []
    for ep in episodes:
        verdicts = []
        for turn in ep.get("turns") or ():
            if not turn.get("format_ok", True):
                verdicts.append(None)
                continue
            key = (turn.get("thought") or "", tuple(turn.get("actions") or ()))
            if key not in cache:
                cache[key] = is_mismatch(key[0], key[1], action_names)
            verdicts.append(cache[key])
        out.append(verdicts)
    return out


def step_stats(
    episodes: Sequence[dict[str, Any]],
    action_names: Sequence[str] | None,
    verdicts: list[list[bool | None]] | None = None,
) -> dict[str, float]:
    """The module's statistics over every turn of ``episodes`` (trajectory records);
    ``verdicts``: :func:`mismatches` of them, when already computed."""
    thoughts = [t.get("thought") or "" for ep in episodes for t in ep.get("turns") or ()]
    thoughts = [t for t in thoughts if t.strip()]
    flat = [v for vs in verdicts or mismatches(episodes, action_names) for v in vs]
    judged = [v for v in flat if v is not None]
    return {
        "top_thought_share": top_thought_share(thoughts, action_names),
        "distinct_2": distinct_n(thoughts, 2),
        "thought_words": mean_words(thoughts),
        "mismatch_rate": sum(judged) / len(judged) if judged else 0.0,
        "thoughts": float(len(thoughts)),
    }


def sample_thoughts(episodes: Sequence[dict[str, Any]], k: int = 5) -> list[str]:
    """Up to ``k`` distinct non-empty thoughts, in order of first appearance."""
    out: list[str] = []
    for ep in episodes:
        for turn in ep.get("turns") or ():
            thought = (turn.get("thought") or "").strip()
            if thought and thought not in out:
                out.append(thought)
                if len(out) == k:
                    return out
    return out

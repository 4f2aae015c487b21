"""Machine-checkable statements about a grid state: ``player (2,3); box (3,3); target (4,3)``.

A *fact* names an object kind and the cell it is on, as ``(row,col)`` counted from 0
at the top-left cell of the rendered grid (Sokoban's border walls included). The same
compact, canonical text is used in three places:

* the ``coord`` / ``grid_coord`` observation formats (the env lists its objects);
* the ``<observation>`` part of a grounded thought (the agent states the facts of the
  current state) and the ``<prediction>`` part of a world-modelling thought (the agent
  states the facts of the state after its actions);
* the rule-based reasoning rewards, which parse those statements and compare them with
  the env's own facts (:func:`match_score`).

Grammar (whitespace-insensitive, kinds case-insensitive)::

    statement := fact (";" fact)* [";"]
    fact      := kind "(" int "," int ")"

An env that supports the reasoning checks (``Env.fact_kinds`` non-empty) implements
``state_facts()`` (the facts a grounded thought must state) and
``predict_facts(actions)`` (the facts of the dynamic objects after the *intended*
outcome of ``actions``; see each env for what "intended" means).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ragen.errors import check_choice

#: the text observation formats of the grid envs (FrozenLake, Sokoban):
#:
#: * ``"grid"``: the symbol grid, one text row per grid row (the default);
#: * ``"coord"``: the objects as facts, ``size (rows,cols); player (r,c); ...``, which
#:   determine the whole state (each env documents what it lists);
#: * ``"grid_coord"``: the grid, a newline, then the coord text.
OBSERVATION_FORMATS: tuple[str, ...] = ("grid", "coord", "grid_coord")

#: the sentence every grid env's instructions use for the coordinate convention
COORDINATE_CONVENTION = (
    "Cells are named (row,col), counted from 0 at the top-left: row 0 is the top row, "
    "col 0 the leftmost column."
)


@dataclass(frozen=True, order=True)
class Fact:
    """``kind`` is on cell ``(row, col)``; e.g. ``Fact("box", 3, 3)``."""

    kind: str
    row: int
    col: int

    def __str__(self) -> str:
        return f"{self.kind} ({self.row},{self.col})"


def format_facts(facts: Iterable[Fact]) -> str:
    """The canonical text of ``facts``, in the given order: ``player (2,3); box (3,3)``."""
    return "; ".join(str(f) for f in facts)


@dataclass
class FactParse:
    """The result of :func:`parse_facts`: the facts read, or ``error`` (then ``facts`` is empty)."""

    facts: list[Fact] = field(default_factory=list)
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error


_FACT = re.compile(r"^\s*([A-Za-z_]+)\s*\(\s*(\d{1,3})\s*,\s*(\d{1,3})\s*\)\s*$")


def parse_facts(text: str, kinds: Sequence[str]) -> FactParse:
    """Read a statement (see the module grammar) whose kinds are in ``kinds``.

    Strict: one unreadable piece or an unknown kind fails the whole statement, with an
    ``error`` naming the piece, so the agent gets no credit for text it did not state
    in the checkable form. An empty statement parses to no facts (``ok``).

    >>> parse_facts("player (2,3); box (3,3)", ("player", "box")).facts
    [Fact(kind='player', row=2, col=3), Fact(kind='box', row=3, col=3)]
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_facts expects a str, got {type(text).__name__}")
    allowed = {k.lower() for k in kinds}
    pieces = [p for p in text.split(";")]
    if pieces and not pieces[-1].strip():  # a trailing ";" is allowed
        pieces = pieces[:-1]
    if len(pieces) == 1 and not pieces[0].strip():
        return FactParse()
    facts = []
    for piece in pieces:
        m = _FACT.match(piece)
        if m is None:
            return FactParse(
                error=f"unreadable fact {piece.strip()[:40]!r}; write 'kind (row,col)'"
            )
        kind = m.group(1).lower()
        if kind not in allowed:
            return FactParse(error=f"unknown kind {kind!r}; use {', '.join(sorted(allowed))}")
        facts.append(Fact(kind, int(m.group(2)), int(m.group(3))))
    return FactParse(facts)


def match_score(stated: Sequence[Fact], truth: Sequence[Fact]) -> float:
    """How well ``stated`` matches ``truth``, in [0, 1]:
    ``|stated ∩ truth| / max(|stated|, |truth|)`` (multisets; 1.0 when both are empty).

    It is the share of stated facts that are true (precision) whenever the statement is
    at least as long as the truth, and it also charges what is left out: stating one
    true fact of three scores 1/3, not 1. Repeating a true fact does not count twice.
    """
    if not stated and not truth:
        return 1.0
    common = sum((Counter(stated) & Counter(truth)).values())
    return common / max(len(stated), len(truth))


def check_observation_format(value: str) -> str:
    """``value`` if it is one of :data:`OBSERVATION_FORMATS`, else a
    :class:`~ragen.errors.ConfigError` (a ``ValueError``) naming the choices."""
    check_choice("observation_format", value, OBSERVATION_FORMATS)
    return value


def compose_observation(observation_format: str, grid: str, coord: str) -> str:
    """The observation text of ``observation_format`` from the grid and the coord text."""
    if observation_format == "grid":
        return grid
    if observation_format == "coord":
        return coord
    return f"{grid}\n{coord}"


def coord_legend(observation_format: str, what: str) -> str:
    """The instructions' paragraph on reading a coord observation: ``what`` (the env's
    own legend, e.g. "the map as 'kind (row,col)' facts ...") after the words that say
    where the list is; empty for the ``grid`` format."""
    if observation_format == "grid":
        return ""
    if observation_format == "coord":
        return f"The observation lists {what}\n"
    return f"Below the grid, the observation also lists {what}\n"

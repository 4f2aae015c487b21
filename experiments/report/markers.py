"""Generated blocks in a markdown page: find them, fill them, say where a page differs.

A block is

    <!-- generated:NAME ARG ... -->
    (text the generator writes)
    <!-- /generated -->

``NAME`` picks the renderer (:mod:`experiments.report.blocks`), the words after it are
its arguments (``key=value`` or plain). The markers are HTML comments, so a rendered page
shows only the text between them; everything outside a block is the page's own prose.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass

OPEN = re.compile(r"<!-- generated:(?P<head>[a-z][^>]*?) -->")  # a NAME starts with a letter
CLOSE = "<!-- /generated -->"


@dataclass(frozen=True)
class Block:
    """One block: its name, its arguments, and where its body lies in the page."""

    name: str
    args: tuple[str, ...]
    start: int  # index of the body's first character (just after the opening marker)
    end: int  # index of the closing marker

    @property
    def options(self) -> dict[str, str]:
        """The ``key=value`` arguments."""
        return dict(a.split("=", 1) for a in self.args if "=" in a)

    @property
    def positional(self) -> list[str]:
        return [a for a in self.args if "=" not in a]


class MarkerError(ValueError):
    """A page's markers do not pair up."""


def find_blocks(text: str) -> list[Block]:
    """Every block of ``text``, in order; raises :class:`MarkerError` for an opening
    marker without its close or a block inside a block."""
    blocks, pos = [], 0
    while (m := OPEN.search(text, pos)) is not None:
        end = text.find(CLOSE, m.end())
        if end < 0:
            raise MarkerError(f"'{m.group(0)}' has no '{CLOSE}' after it")
        inner = OPEN.search(text, m.end(), end)
        if inner is not None:
            raise MarkerError(f"'{inner.group(0)}' opens inside '{m.group(0)}'")
        name, *args = m.group("head").split()
        blocks.append(Block(name, tuple(args), m.end(), end))
        pos = end + len(CLOSE)
    return blocks


def fill(text: str, render: Callable[[Block], str]) -> str:
    """``text`` with every block's body replaced by ``render(block)``. A block whose
    opening marker ends its line gets its body on lines of its own; an inline one (the
    marker inside a sentence) gets it inline."""
    out, pos = [], 0
    for block in find_blocks(text):
        body = render(block).strip("\n")
        on_lines = text.startswith("\n", block.start)
        out.append(text[pos : block.start])
        out.append(f"\n{body}\n" if on_lines else body)
        pos = block.end
    out.append(text[pos:])
    return "".join(out)


def diff(old: str, new: str, name: str) -> str:
    """A unified diff of a page against what its files give (empty when equal)."""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"{name} (committed)",
        tofile=f"{name} (from its results files)",
        n=1,
    )
    return "".join(lines)

"""The one Markdown table every generated block writes."""

from __future__ import annotations


def markdown_table(head: list[str], rows: list[list[str]]) -> str:
    """``| a | b |`` lines: the header, its ``|---|`` rule, then one line per row."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])

"""The training config, described from its fields: ``ragen train --help-config``,
``--print-config`` and docs/CONFIG.md.

Nothing here is written by hand about a key: the help, type, choices and range come from
each field's metadata (``ragen.config_fields.option``), the defaults from the dataclasses
of ``ragen.trainer.config`` (one module per section), and which advantage estimators or policy losses read a key
from the algo registry (a key named like a hyper-parameter of a registered estimator or
loss is read by it). ``tests/test_config_doc.py`` fails when docs/CONFIG.md is stale;
regenerate it with ``ragen train --help-config markdown > docs/CONFIG.md``.
"""

from __future__ import annotations

import dataclasses
import inspect
import textwrap
from typing import Any

import yaml

from ragen.algo.registry import (
    get_advantage_estimator,
    get_policy_loss,
    list_advantage_estimators,
    list_policy_losses,
)
from ragen.config_fields import default_of, spec_of, walk_fields

from .train_config import TrainConfig

__all__ = ["KeyInfo", "describe", "help_text", "markdown", "commented_yaml"]


@dataclasses.dataclass(frozen=True)
class KeyInfo:
    """One config key as the docs show it."""

    key: str  # algo.gamma
    default: Any
    type: str  # float, int | None, list[str], ...
    accepts: str  # "one of: a, b" / "in [0, 1]" / ""
    help: str  # the field's help plus what reads it


def _used_by(key: str) -> str:
    """Which registered estimators / policy losses take ``algo.<leaf>`` as a hyper-parameter."""
    section, _, leaf = key.partition(".")
    if section != "algo" or "." in leaf:
        return ""
    parts = []
    estimators = [n for n in list_advantage_estimators()
                  if leaf in get_advantage_estimator(n).hyper_params]  # fmt: skip
    if estimators:
        parts.append(f"read by the estimators {', '.join(estimators)}")
    losses = [n for n in list_policy_losses() if leaf in get_policy_loss(n).hyper_params]
    if losses:
        parts.append(f"read by the policy loss {', '.join(losses)}")
    return "; ".join(parts)


def _accepts(f: dataclasses.Field) -> str:
    spec = spec_of(f)
    if spec is None:
        return ""
    choices = spec.choice_list()
    if choices is not None:
        each = "each one of" if str(f.type).startswith("list") else "one of"
        return f"{each}: {', '.join(str(c) for c in choices)}"
    words = spec.range_text()
    if not words:
        return ""
    words = f"in {words}" if words[0] in "[(" else words
    return f"null or {words}" if "None" in str(f.type) else words


def describe(config: Any = None) -> list[KeyInfo]:
    """Every key of ``ragen train``'s config, in field order; defaults from ``config``
    (a :class:`TrainConfig`) when given, else the dataclasses' own."""
    infos = []
    for key, f, value in walk_fields(config if config is not None else TrainConfig):
        spec = spec_of(f)
        # every key is declared with option(...); tests/test_config_doc.py fails on one
        # that is not, while the commands still print the rest
        text = spec.help if spec is not None else ""
        used = _used_by(key)
        if used:
            text = f"{text} ({used})"
        infos.append(KeyInfo(key, value, str(f.type), _accepts(f), text))
    return infos


def _show(value: Any) -> str:
    """A value as YAML in one line (``null``, ``true``, ``[8, 8]``, ``tiny``)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return text.removesuffix("...").strip()


def help_text() -> str:
    """``ragen train --help-config``: every key, its default, type, accepted values and help."""
    lines = [
        "ragen train: every config key (set one with section.key=value; presets: "
        "ragen train --list-presets)",
        "",
    ]
    for info in describe():
        lines.append(f"{info.key} = {_show(info.default)}  ({info.type})")
        accepts = info.accepts
        if accepts and not accepts.startswith(("one of", "each one of")):
            accepts = f"range: {accepts}"
        for text in (info.help, accepts):
            lines += textwrap.wrap(text, 88, initial_indent="    ", subsequent_indent="    ")
    return "\n".join(lines) + "\n"


def _section_doc(key: str) -> str:
    """The docstring of the section class that holds ``key``'s parent (first paragraph)."""
    node: Any = TrainConfig
    for part in key.split(".")[:-1]:
        field = {f.name: f for f in dataclasses.fields(node)}[part]
        node = type(default_of(field))
    doc = inspect.getdoc(node) or ""
    if node is TrainConfig or doc.startswith(node.__name__ + "("):  # dataclass default
        return ""
    return " ".join(doc.split("\n\n")[0].split())


def markdown() -> str:
    """docs/CONFIG.md: one table per section."""
    out = [
        "# Configuration reference",
        "",
        "Every key of `ragen train`, generated from the fields of the sections in",
        "`ragen/trainer/config/` (and `RolloutConfig`, `CollapseConfig`), where each key's help,",
        "type, choices and range are written beside its default. Do not edit this file by hand: regenerate it",
        "with `ragen train --help-config markdown > docs/CONFIG.md` (`tests/test_config_doc.py`",
        "fails when it is stale). `ragen train --help-config` prints the same in a terminal,",
        "`ragen train ... --print-config` the resolved config with each key's help.",
        "",
        "Set a key with `section.key=value` (`algo.gamma=0.99`), a preset with",
        "`env=NAME algo=NAME model=NAME`, a file with `config=FILE.yaml`; docs/TRAINING.md",
        "explains how they combine. Values are YAML: `null`, `true`, `[8, 8]`.",
    ]
    section = None
    for info in describe():
        parent = info.key.rsplit(".", 1)[0]
        if parent != section:
            section = parent
            out += ["", f"## `{section}`", ""]
            doc = _section_doc(info.key)
            if doc:
                out += [doc, ""]
            out += ["| key | default | type | accepts | what it does |", "|---|---|---|---|---|"]
        cells = [
            f"`{info.key}`",
            f"`{_show(info.default)}`",
            f"`{info.type}`",
            info.accepts,
            info.help,
        ]
        cells[3:] = [c.replace("<", "&lt;") for c in cells[3:]]  # <think> is not HTML
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(out) + "\n"


def commented_yaml(config: TrainConfig) -> str:
    """``--print-config``: the resolved config as YAML, each key under its help as a
    comment (the file loads back with ``config=FILE``)."""
    infos = {info.key: info for info in describe(config)}
    lines: list[str] = []

    def emit(node: Any, prefix: str, indent: str) -> None:
        for f in dataclasses.fields(node):
            value, key = getattr(node, f.name), f"{prefix}{f.name}"
            if dataclasses.is_dataclass(value):
                lines.append(f"{indent}{_show(f.name)}:")
                emit(value, f"{key}.", indent + "  ")
                continue
            info = infos[key]
            accepts = info.accepts if info.accepts.count(",") < 10 else ""  # not 30 env names
            about = info.help + (f" [{accepts}]" if accepts else "")
            lines.extend(textwrap.wrap(about, 88 - len(indent), initial_indent=f"{indent}# ",
                                       subsequent_indent=f"{indent}# "))  # fmt: skip
            lines.append(f"{indent}{_show(f.name)}: {_show(value)}")  # YAML reads on: as true

    emit(config, "", "")
    return "\n".join(lines) + "\n"

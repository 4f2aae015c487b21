"""The one ``KEY=VALUE`` parser of every ``ragen`` command.

    >>> parse_key_values(["a=1", "b=[8, 8]", "c=true", "p=1/3", "lr=1e-3", "d=x"])
    {'a': 1, 'b': [8, 8], 'c': True, 'p': 0.333..., 'lr': 0.001, 'd': 'x'}

Values are YAML (``null``, ``true``, ``[8, 8]``, ``{a: 1}``), with two additions a
command line needs: ``1e-3`` is a float (YAML 1.1 wants ``1.0e-3``) and ``1/3`` is a
fraction. A value that is not valid YAML stays the raw string; an empty value is ``""``.
Used by ``ragen train`` (dotted config overrides), ``ragen eval``/``ragen sft``
(``--env-config``) and ``ragen play`` (``--set``). The rollout flags those commands share
are generated from ``RolloutConfig`` in ``ragen.agent.rollout_flags``.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from ragen.errors import UsageError

_FLOAT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def split_key_value(
    item: str, option: str = "argument", error: type[Exception] = UsageError
) -> tuple[str, str]:
    """``"a.b=1"`` -> ``("a.b", "1")``; a missing ``=`` or key raises ``error``
    (:class:`UsageError` by default) naming ``option``."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise error(f"{option} expects KEY=VALUE, got {item!r}")
    return key.strip(), raw


def parse_value(raw: str) -> Any:
    """One value as YAML, plus ``1e-3`` floats and ``a/b`` fractions (see module docstring)."""
    import yaml

    if not raw.strip():
        return ""
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw
    if isinstance(value, str):
        text = value.strip()
        if _FLOAT.match(text):
            return float(text)
        num, slash, den = text.partition("/")
        if slash and _FLOAT.match(num.strip()) and _FLOAT.match(den.strip()):
            try:
                return float(num) / float(den)
            except ZeroDivisionError:
                return value
    return value


def parse_key_values(items: list[str] | None, option: str = "argument") -> dict[str, Any]:
    """``["a=1", "b=[8, 8]"]`` -> ``{"a": 1, "b": [8, 8]}``; keys are kept as written
    (dots included); ``option`` names the flag in the error message."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, raw = split_key_value(item, option)
        out[key] = parse_value(raw)
    return out


def nest_dotted(flat: dict[str, Any]) -> dict[str, Any]:
    """``{"a.b": 1, "a.c": 2}`` -> ``{"a": {"b": 1, "c": 2}}``."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise UsageError(f"{key!r} sets a key below {part!r}, which is also set to a value")
            node = child
        node[leaf] = value
    return out


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Every ``ragen`` command's help: the description as written, and ``(default: X)``
    after each option's help unless the help already states its default or there is none."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text.lower() or action.default in (None, argparse.SUPPRESS, []):
            return text
        if action.default is False and action.option_strings:
            return text  # a plain switch: off unless given
        if not action.option_strings and action.nargs not in ("?", "*"):
            return text  # a required positional
        return text + " (default: %(default)s)"


def check_out_dir(path: str | Path, flag: str = "--out") -> Path:
    """Check, before any work, that the output folder ``path`` can be created, or raise a
    one-line :class:`UsageError` (an existing file, a place that cannot be written).
    Leaves nothing behind: the folders it creates to find out are removed again."""
    out = Path(path).expanduser()
    if out.exists() and not out.is_dir():
        raise UsageError(f"{flag} {out} exists and is not a folder. Fix: choose another {flag}")
    missing = []
    for folder in (out, *out.parents):
        if folder.exists():
            break
        missing.append(folder)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(
            f"{flag} {out}: cannot create it ({err.strerror or err}). Fix: choose a writable folder"
        ) from None
    for folder in missing:  # deepest first
        folder.rmdir()
    return out


def add_env_config_flag(parser: Any) -> None:
    """``--env-config KEY=VALUE ...``: the environment options of ``ragen eval``/``sft``
    (parse with :func:`parse_key_values`)."""
    parser.add_argument(
        "--env-config",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="environment options, values in YAML (e.g. dim_room=[8,8])",
    )

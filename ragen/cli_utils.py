"""The one ``KEY=VALUE`` parser of every ``ragen`` command.

    >>> parse_key_values(["a=1", "b=[8, 8]", "c=true", "p=1/3", "lr=1e-3", "d=x"])
    {'a': 1, 'b': [8, 8], 'c': True, 'p': 0.333..., 'lr': 0.001, 'd': 'x'}

Values are YAML (``null``, ``true``, ``[8, 8]``, ``{a: 1}``), with two additions a
command line needs: ``1e-3`` is a float (YAML 1.1 wants ``1.0e-3``) and ``1/3`` is a
fraction. A value that is not valid YAML stays the raw string; an empty value is ``""``.
Used by ``ragen train`` (dotted config overrides), ``ragen eval``/``ragen sft``
(``--env-config``) and ``ragen play`` (``--set``).
"""

from __future__ import annotations

import argparse
import re
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


_ROLLOUT_DEFAULTS = "_rollout_defaults"  # where add_rollout_flags keeps its defaults


def add_rollout_flags(
    parser: Any, names: list[str] | None = None, defaults: dict[str, Any] | None = None
) -> None:
    """Add one ``--flag`` per :class:`~ragen.agent.rollout.RolloutConfig` field in ``names``
    (default: all but ``env_groups``/``group_size``/``seed``): ``max_new_tokens`` ->
    ``--max-new-tokens``, a bool ``flag`` -> ``--flag``/``--no-flag``.

    Every flag's argparse default is None, so a flag given on the command line is told
    apart from one left out (:func:`given_rollout_flags`); the effective default (the
    dataclass's, unless ``defaults`` overrides it) is shown in ``--help`` and applied by
    :func:`rollout_from_args`.
    """
    import argparse
    from dataclasses import MISSING, fields

    from ragen.agent.context import TEMPLATE_STRATEGIES
    from ragen.agent.prompts import PROMPT_STYLES
    from ragen.agent.reasoning import REASONING_FORMATS
    from ragen.agent.rollout import RolloutConfig

    choices = {
        "prompt_style": PROMPT_STYLES,
        "template_strategy": TEMPLATE_STRATEGIES,
        "reasoning": REASONING_FORMATS,
    }
    known = {f.name: f for f in fields(RolloutConfig)}
    wanted = names or [n for n in known if n not in ("env_groups", "group_size", "seed")]
    group = parser.add_argument_group("rollout (the same knobs as `ragen train rollout.*`)")
    effective: dict[str, Any] = {}
    for name in wanted:
        f = known[name]
        default = (defaults or {}).get(name, f.default if f.default is not MISSING else None)
        effective[name] = default
        flag = "--" + name.replace("_", "-")
        what = f"rollout.{name}"
        if isinstance(default, bool):
            group.add_argument(
                flag,
                dest=name,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=f"{what} (default: {str(default).lower()})",
            )
            continue
        kind = type(default) if default is not None else int  # context_window: int | None
        group.add_argument(
            flag,
            dest=name,
            type=kind,
            default=None,
            choices=choices.get(name),
            help=f"{what} (default: {default})",
        )
    parser.set_defaults(**{_ROLLOUT_DEFAULTS: effective})


def given_rollout_flags(args: Any) -> dict[str, Any]:
    """The rollout flags of :func:`add_rollout_flags` given on the command line."""
    from dataclasses import fields

    from ragen.agent.rollout import RolloutConfig

    names = [f.name for f in fields(RolloutConfig)]
    return {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}


def rollout_from_args(args: Any, inherited: dict[str, Any] | None = None, **overrides: Any):
    """The :class:`~ragen.agent.rollout.RolloutConfig` the flags of
    :func:`add_rollout_flags` describe. Precedence, highest first: ``overrides``, flags
    given on the command line, ``inherited`` (e.g. a training run's settings), the flags'
    defaults, the dataclass defaults."""
    from ragen.agent.rollout import RolloutConfig

    values = {
        **getattr(args, _ROLLOUT_DEFAULTS, {}),
        **(inherited or {}),
        **given_rollout_flags(args),
        **overrides,
    }
    return RolloutConfig(**values)


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

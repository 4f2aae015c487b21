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


def add_rollout_flags(
    parser: Any, names: list[str] | None = None, defaults: dict[str, Any] | None = None
) -> None:
    """Add one ``--flag`` per :class:`~ragen.agent.rollout.RolloutConfig` field in ``names``
    (default: all but ``env_groups``/``group_size``/``seed``): ``max_new_tokens`` ->
    ``--max-new-tokens``, the bool ``think`` -> ``--no-think``. Defaults come from the
    dataclass unless ``defaults`` overrides them; :func:`rollout_from_args` reads them back.
    """
    from dataclasses import MISSING, fields

    from ragen.agent.context import TEMPLATE_STRATEGIES
    from ragen.agent.prompts import PROMPT_STYLES
    from ragen.agent.rollout import RolloutConfig

    choices = {"prompt_style": PROMPT_STYLES, "template_strategy": TEMPLATE_STRATEGIES}
    known = {f.name: f for f in fields(RolloutConfig)}
    wanted = names or [n for n in known if n not in ("env_groups", "group_size", "seed")]
    group = parser.add_argument_group("rollout (the same knobs as `ragen train rollout.*`)")
    for name in wanted:
        f = known[name]
        default = (defaults or {}).get(name, f.default if f.default is not MISSING else None)
        flag = "--" + name.replace("_", "-")
        if isinstance(default, bool):
            neg = "--no-" + name.replace("_", "-")
            group.add_argument(
                neg if default else flag,
                dest=name,
                action="store_false" if default else "store_true",
                help=f"rollout.{name}={str(not default).lower()}",
            )
            group.set_defaults(**{name: default})
            continue
        kind = type(default) if default is not None else int  # context_window: int | None
        group.add_argument(
            flag,
            dest=name,
            type=kind,
            default=default,
            choices=choices.get(name),
            help=f"rollout.{name} (default {default})",
        )


def rollout_from_args(args: Any, **overrides: Any):
    """The :class:`~ragen.agent.rollout.RolloutConfig` the flags of
    :func:`add_rollout_flags` describe (fields without a flag keep their defaults)."""
    from dataclasses import fields

    from ragen.agent.rollout import RolloutConfig

    values = {f.name: getattr(args, f.name) for f in fields(RolloutConfig) if hasattr(args, f.name)}
    return RolloutConfig(**{**values, **overrides})

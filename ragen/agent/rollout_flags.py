"""The ``--max-new-tokens``-style rollout flags of ``ragen eval`` and ``ragen sft``,
generated from :class:`~ragen.agent.rollout.RolloutConfig`'s fields: each flag's help and
choices are the field's metadata, the same text ``ragen train --help-config`` shows for
``rollout.<key>``.
"""

from __future__ import annotations

import argparse
from dataclasses import fields
from typing import Any

from ragen.config_fields import default_of, spec_of

from .rollout import RolloutConfig

__all__ = ["add_rollout_flags", "given_rollout_flags", "rollout_from_args"]

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
    known = {f.name: f for f in fields(RolloutConfig)}
    wanted = names or [n for n in known if n not in ("env_groups", "group_size", "seed")]
    group = parser.add_argument_group("rollout (the same knobs as `ragen train rollout.*`)")
    effective: dict[str, Any] = {}
    for name in wanted:
        f = known[name]
        spec = spec_of(f)
        default = (defaults or {}).get(name, default_of(f))
        effective[name] = default
        flag = "--" + name.replace("_", "-")
        what = f"rollout.{name}: {spec.help}" if spec else f"rollout.{name}"
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
            choices=spec.choice_list() if spec else None,
            help=f"{what} (default: {default})",
        )
    parser.set_defaults(**{_ROLLOUT_DEFAULTS: effective})


def given_rollout_flags(args: Any) -> dict[str, Any]:
    """The rollout flags of :func:`add_rollout_flags` given on the command line."""
    names = [f.name for f in fields(RolloutConfig)]
    return {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}


def rollout_from_args(args: Any, inherited: dict[str, Any] | None = None, **overrides: Any):
    """The :class:`~ragen.agent.rollout.RolloutConfig` the flags of
    :func:`add_rollout_flags` describe. Precedence, highest first: ``overrides``, flags
    given on the command line, ``inherited`` (e.g. a training run's settings), the flags'
    defaults, the dataclass defaults."""
    values = {
        **getattr(args, _ROLLOUT_DEFAULTS, {}),
        **(inherited or {}),
        **given_rollout_flags(args),
        **overrides,
    }
    return RolloutConfig(**values)

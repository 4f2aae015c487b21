"""What a rollback may change mid-run (``trainer.rollback_change``), and how a change is
written: ``key=value`` sets, ``key=*F`` scales the current value
(``ragen.trainer.collapse_guard`` applies it with
:func:`ragen.trainer.config.validation.apply_rollback_change`)."""

from __future__ import annotations

import difflib
from typing import Any

from ragen.cli_utils import parse_value, split_key_value
from ragen.config_fields import fail
from ragen.errors import ConfigError

# keys a rollback may change mid-run: read afresh every step (the construction-time keys,
# e.g. algo.use_critic or rollout.group_size, would need new models or env managers)
ROLLBACK_KEYS = (
    "model.actor_lr",
    "model.critic_lr",
    "rollout.temperature",
    "algo.filter.strategy",
    "algo.filter.value",
    "algo.filter.metric",
    "algo.filter.include_zero",
    "algo.adv_estimator",
    "algo.norm_method",
    "algo.norm_grouping",
    "algo.loss_agg_mode",
    "algo.whiten_advantages",
    "algo.clip_ratio_low",
    "algo.clip_ratio_high",
    "algo.entropy_coef",
    "algo.grad_clip",
    "algo.ppo_epochs",
)


def parse_rollback_change(items: list[str]) -> list[tuple[str, str, Any]]:
    """``["model.actor_lr=*0.5", "algo.filter.value=0.25"]`` -> ``[(key, op, value)]``
    with op ``"set"`` or ``"scale"`` (a ``*F`` value multiplies the current one)."""
    out = []
    for item in items:
        key, raw = split_key_value(
            str(item), "a rollback change (e.g. model.actor_lr=*0.5)", ConfigError
        )
        if key not in ROLLBACK_KEYS:
            close = difflib.get_close_matches(key, ROLLBACK_KEYS, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            fail(
                "trainer.rollback_change",
                f"{key!r} cannot change mid-run.{hint}",
                f"use one of {', '.join(ROLLBACK_KEYS)}",
            )
        if raw.startswith("*"):
            try:
                factor = float(raw[1:])
            except ValueError:
                factor = float("nan")
            if not factor > 0:
                fail(
                    "trainer.rollback_change",
                    f"{item!r}: a scale must be *<positive number>",
                    "e.g. *0.5",
                )
            out.append((key, "scale", factor))
        else:
            out.append((key, "set", parse_value(raw)))
    return out

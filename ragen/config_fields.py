"""Config fields that describe themselves: help, choices and range beside the default.

    @dataclass
    class AlgoConfig:
        gamma: float = option(1.0, "discount per token in GAE", ge=0, le=1)
        kl_type: str = option("low_var_kl", "the KL estimator", choices=KL_KINDS)

Everything about a config key is written once, on its field, as dataclass metadata
(the sections stay plain dataclasses, which OmegaConf merges and type-checks): the
help text, the accepted values (a tuple, or a callable that asks a registry, so a name
registered later is accepted too), the range (``ge``/``gt``/``le``/``lt``; ``None``
always passes where the type allows it) and a custom ``check`` for what no range says
(a device name). :func:`check_section` validates a section from it; ``ragen train
--help-config``, ``--print-config`` and docs/CONFIG.md print it
(``ragen.trainer.config.describe``). Checks that involve two keys stay in code beside
the section (``RolloutConfig.validate``, ``ragen.trainer.config.validation``), and
raise the same one-line error through :func:`fail`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ragen.errors import ConfigError, check_choice

__all__ = ["Spec", "option", "spec_of", "check_section", "walk_fields", "display_key", "fail"]

_META = "ragen"  # the metadata key of a field's Spec


@dataclasses.dataclass(frozen=True)
class Spec:
    """What a config key means and accepts (the metadata of one dataclass field)."""

    help: str
    choices: tuple[Any, ...] | Callable[[], Iterable[Any]] | None = None
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    fix: str | None = None  # how to fix an out-of-range value; default: "e.g. <default>"
    check: Callable[[Any, str], None] | None = None  # (value, key) -> raises ConfigError

    def choice_list(self) -> list[Any] | None:
        """The accepted values now (a registry callable is asked afresh)."""
        if self.choices is None:
            return None
        return list(self.choices() if callable(self.choices) else self.choices)

    def range_text(self) -> str:
        """``"[0, 1]"``, ``">= 1"``, ``"(0, 1]"``...; ``""`` without a range."""
        low = (self.ge, "[") if self.ge is not None else (self.gt, "(")
        high = (self.le, "]") if self.le is not None else (self.lt, ")")
        if low[0] is not None and high[0] is not None:
            return f"{low[1]}{_num(low[0])}, {_num(high[0])}{high[1]}"
        if low[0] is not None:
            return f"{'>=' if self.ge is not None else '>'} {_num(low[0])}"
        if high[0] is not None:
            return f"{'<=' if self.le is not None else '<'} {_num(high[0])}"
        return ""

    def in_range(self, value: float) -> bool:
        """Whether ``value`` lies in the range (NaN never does)."""
        return (
            (self.ge is None or value >= self.ge)
            and (self.gt is None or value > self.gt)
            and (self.le is None or value <= self.le)
            and (self.lt is None or value < self.lt)
        )


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def option(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
    choices: tuple[Any, ...] | Callable[[], Iterable[Any]] | None = None,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    fix: str | None = None,
    check: Callable[[Any, str], None] | None = None,
) -> Any:
    """A dataclass field with its :class:`Spec` (give ``default`` or ``default_factory``)."""
    if not help:
        raise TypeError("every config key needs a help text")
    spec = Spec(help, choices, ge, gt, le, lt, fix, check)
    return dataclasses.field(
        default=default, default_factory=default_factory, metadata={_META: spec}
    )


def spec_of(f: dataclasses.Field) -> Spec | None:
    """The :class:`Spec` of a field made by :func:`option` (None for a plain field)."""
    return f.metadata.get(_META)


def default_of(f: dataclasses.Field) -> Any:
    """A field's default value (its factory called)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def display_key(prefix: str, name: str) -> str:
    """The key as the user wrote it: ``rollout.top_p``, or ``--top-p`` for a CLI flag."""
    return f"--{name.replace('_', '-')}" if prefix == "--" else f"{prefix}{name}"


def walk_fields(obj_or_cls: Any, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field, Any]]:
    """``(full key, field, value)`` for every leaf of a config section, depth first, in
    field order; a nested section is entered, not yielded. On a class the value is the
    default."""
    is_class = isinstance(obj_or_cls, type)
    for f in dataclasses.fields(obj_or_cls):
        value = default_of(f) if is_class else getattr(obj_or_cls, f.name)
        if dataclasses.is_dataclass(value):
            yield from walk_fields(value, f"{prefix}{f.name}.")
        else:
            yield display_key(prefix, f.name), f, value


def fail(key: str, problem: str, fix: str) -> None:
    """Raise the one-line :class:`~ragen.errors.ConfigError` every config check raises:
    ``"<key>: <problem>. Fix: <fix>"``."""
    raise ConfigError(f"{key}: {problem}. Fix: {fix}")


def check_section(obj: Any, prefix: str = "", *, what: str = "all") -> None:
    """Validate every key of ``obj`` (and of its nested sections) against its Spec.

    ``what``: ``"choices"`` (enumerated values and custom checks), ``"ranges"`` (finite
    floats and ranges) or ``"all"``; the trainer checks every section's choices before
    any range, so the most basic problem is the one reported. Raises a one-line
    :class:`~ragen.errors.ConfigError` naming the full key, the problem and the fix.
    """
    for key, f, value in walk_fields(obj, prefix):
        spec = spec_of(f)
        if what in ("choices", "all"):
            _check_choice(key, spec, value)
        if what in ("ranges", "all"):
            _check_range(key, f, spec, value)


def _check_choice(key: str, spec: Spec | None, value: Any) -> None:
    if spec is None:
        return
    choices = spec.choice_list()
    if choices is not None and value is not None:
        for item in value if isinstance(value, (list, tuple)) else [value]:
            check_choice(key, item, choices)
    if spec.check is not None:
        spec.check(value, key)


def _check_range(key: str, f: dataclasses.Field, spec: Spec | None, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if isinstance(value, float) and not math.isfinite(value):
        # NaN passes every "value <= 0" style check; an inf learning rate trains NaN
        default = default_of(f)
        example = "null (off)" if default is None else f"the default {default}"
        raise ConfigError(f"{key}: must be a finite number, got {value}. Fix: give a number, e.g. {example}")  # fmt: skip
    if spec is None or spec.in_range(value):
        return
    default = default_of(f)
    nullable = "None" in str(f.type)
    fix = spec.fix or (f"e.g. {default}" if default is not None else "null (off)")
    words = spec.range_text()
    words = f"in {words}" if words[0] in "[(" else words
    raise ConfigError(
        f"{key}: must be {'null or ' if nullable else ''}{words}, got {value}. Fix: {fix}"
    )

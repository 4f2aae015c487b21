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
import errno
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ragen.errors import DiskFullError, RagenError, RunDirError, UsageError

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
    probe = out / f".ragen-write-check-{os.getpid()}"
    try:  # a folder that exists can still refuse files: read-only, or a full disk
        with open(probe, "wb") as f:
            f.write(b"x")
            f.flush()
    except OSError as err:
        raise write_error(err, out, "anything", flag) from None
    finally:
        probe.unlink(missing_ok=True)
        for folder in missing:  # deepest first
            folder.rmdir()
    return out


def write_error(err: OSError, out: str | Path, what: str, flag: str = "--out") -> RagenError:
    """The one-line error for a write into the output folder ``out`` that failed: a full
    disk (ENOSPC, a quota) is a :class:`DiskFullError`, anything else (read-only, no
    permission) a :class:`RunDirError`, each naming the fix."""
    reason = err.strerror or str(err)
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFullError(
            f"{flag} {out}: disk full while writing {what} ({reason}); nothing half-written "
            f"was left. Fix: free space on that disk, or another {flag} on a disk with room"
        )
    return RunDirError(
        f"{flag} {out}: cannot write {what} ({reason}). Fix: choose a writable folder"
    )


@contextmanager
def written_whole(path: Path, flag: str = "--out") -> Iterator[Any]:
    """Write ``path`` (text) all or nothing: into ``path.tmp``, renamed over ``path`` once
    complete. A write that fails (a full or read-only disk) removes the partial file and
    raises :func:`write_error`'s one line: no empty or cut-off file is left where a reader
    would take it for the result."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            yield f
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise write_error(err, path.parent, path.name, flag) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


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

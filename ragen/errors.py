"""The errors a user can cause, and can fix.

Every :class:`RagenError` is a user error: its message names the problem and the fix,
in one line. ``ragen <command>`` prints it as ``ragen <command>: error: <message>`` and
exits with status 2; any other exception is a bug and shows its traceback
(``RAGEN_DEBUG=1`` shows the traceback of a ``RagenError`` too).

Each subclass also derives from the built-in exception the same failure raised before
the hierarchy existed (``ConfigError`` is a ``ValueError``, ``UnknownEnvError`` a
``KeyError``, ...), so ``except ValueError`` style callers keep working.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class RagenError(Exception):
    """A user error; the message names the problem and the fix."""

    def __str__(self) -> str:
        # KeyError (and friends) would repr() a single argument; a message is a message
        if len(self.args) == 1:
            return str(self.args[0])
        return super().__str__()


class ConfigError(RagenError, ValueError):
    """A bad configuration value or key; the message names the full key (``algo.kl_type``)."""


class UsageError(RagenError, ValueError):
    """A bad command-line argument, or a missing prerequisite of a command."""


class CheckpointError(RagenError, RuntimeError):
    """A corrupt, incomplete or incompatible checkpoint; the message names the path and the fix."""


class ModelLoadError(RagenError, OSError):
    """A model name, folder or file that cannot be resolved or loaded."""


class EngineError(RagenError, RuntimeError):
    """An inference server that cannot be reached or answers badly (``--api-base``)."""


class UnknownEnvError(RagenError, KeyError):
    """An environment name that is not registered (``ragen envs`` lists them)."""


class EnvConfigError(RagenError, TypeError):
    """An option an environment does not accept (``ragen envs`` lists each env's options)."""


class EnvOptionError(EnvConfigError, ValueError):
    """An environment option whose value the env cannot use (``p=1.5``, ``dim_room=[2, 2]``);
    also a ``ValueError``, as these were before the hierarchy existed."""


class EnvUnavailableError(RagenError, ConnectionError):
    """An environment that cannot play: a served env whose server is unreachable, or a
    rollout whose episodes end by env errors past ``rollout.max_env_error_share``."""


class MissingDependencyError(RagenError, ImportError):
    """An optional dependency is not installed; the message names the pip extra."""


class EnvContractError(RagenError, AssertionError):
    """An environment that breaks the ``Env`` contract (``ragen.envs.checker``)."""


class NonFiniteError(RagenError, FloatingPointError):
    """NaN or inf where numbers must be finite: a loss, a gradient, or model weights about
    to be saved or just loaded; the message names where, what was kept, and the fix."""


class MissingFileError(RagenError, FileNotFoundError):
    """A file or folder the user named that does not exist (a levels file, an env config
    file, a checkpoint, a run's metrics); the message names the path and what to pass."""


class RunDirError(RagenError, OSError):
    """A run folder that cannot be used: read-only, full, or held by another training."""


class DiskFullError(RunDirError):
    """A save (checkpoint, SFT model) that ran, or would run, out of disk space or quota."""


__all__ = [
    "RagenError",
    "ConfigError",
    "UsageError",
    "CheckpointError",
    "ModelLoadError",
    "EngineError",
    "UnknownEnvError",
    "EnvConfigError",
    "EnvOptionError",
    "EnvUnavailableError",
    "EnvContractError",
    "NonFiniteError",
    "RunDirError",
    "DiskFullError",
    "MissingFileError",
    "check_choice",
]


def check_choice(key: str, value: object, choices: Iterable[object]) -> None:
    """Raise a one-line :class:`ConfigError` unless ``value`` is one of ``choices``:

    ``algo.loss_agg_mode: unknown value 'tokn-mean'. Did you mean 'token-mean'? Valid: ...``
    """
    options = list(choices)
    if value in options:
        return
    valid = [str(c) for c in options]
    close = difflib.get_close_matches(str(value), valid, n=1, cutoff=0.5)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ConfigError(f"{key}: unknown value {value!r}.{hint} Valid: {', '.join(valid)}")

"""The agent side of StarPO: prompts, strict parsing, token-exact context, batched rollout.

    >>> from ragen.agent import EnvStateManager, ModelPolicy, RolloutConfig, run_rollout
    >>> manager = EnvStateManager("sokoban", env_groups=8, group_size=16)
    >>> result = run_rollout(ModelPolicy(engine, tokenizer), manager, RolloutConfig(),
    ...                      manager.seeds_for_step(0))

Modules: ``parsing`` (response format), ``prompts`` (message text), ``context``
(token-exact sequences for any chat template), ``env_manager`` (groups and seeds),
``policies``, ``rollout``, ``metrics``, ``evaluate`` (``ragen eval``), ``trajectory``
(the contract with the trainer). See docs/ROLLOUT.md.

Attributes are imported lazily so ``ragen --help`` stays instant.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ParsedResponse": "parsing",
    "parse_response": "parsing",
    "format_response": "parsing",
    "ChatFormat": "context",
    "ContextManager": "context",
    "EnvStateManager": "env_manager",
    "VAL_SEED_START": "env_manager",
    "Policy": "policies",
    "ModelPolicy": "policies",
    "ChatPolicy": "policies",
    "OraclePolicy": "policies",
    "RandomPolicy": "policies",
    "RolloutConfig": "rollout",
    "RolloutResult": "rollout",
    "run_rollout": "rollout",
    "rollout_metrics": "metrics",
    "evaluate": "evaluate",
    "run_evaluation": "evaluate",
    "Trajectory": "trajectory",
    "TurnRecord": "trajectory",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        module = importlib.import_module(f"{__name__}.{_EXPORTS[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)

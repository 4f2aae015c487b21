"""The agent side of StarPO: prompts, strict parsing, token-exact context, batched rollout.

    >>> from ragen.agent import EnvStateManager, ModelPolicy, RolloutConfig, run_rollout
    >>> manager = EnvStateManager("sokoban", env_groups=8, group_size=16)
    >>> result = run_rollout(ModelPolicy(engine, tokenizer), manager, RolloutConfig(),
    ...                      manager.seeds_for_step(0))

Modules: ``parsing`` (response format), ``reasoning`` (reasoning formats: the
thought's sections, strict parsing, consistency), ``reasoning_rewards`` (rule-checked
grounding / world-model / consistency scores), ``prompts`` (message text), ``context``
(token-exact sequences for any chat template), ``env_manager`` (groups and seeds),
``policies``, ``rollout``, ``metrics``, ``evaluate`` (``ragen eval``), ``trajectory``
(the contract with the trainer). See docs/ROLLOUT.md.

Attributes are imported lazily so ``ragen --help`` stays instant.
"""

from __future__ import annotations

from ragen._lazy import lazy_exports

_EXPORTS = {
    "ParsedResponse": "parsing",
    "parse_response": "parsing",
    "format_response": "parsing",
    "REASONING_FORMATS": "reasoning",
    "parse_reply": "reasoning",
    "format_reply": "reasoning",
    "REASONING_REWARDS": "reasoning_rewards",
    "ReasoningScores": "reasoning_rewards",
    "score_turn": "reasoning_rewards",
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

__getattr__, __dir__, __all__ = lazy_exports(__name__, globals(), _EXPORTS)

"""ragen: multi-turn reinforcement learning for LLM agents (StarPO / StarPO-S / TRICO)."""

__version__ = "0.1.0"

"""Generation backends behind one interface.

Token engines (local transformers) take prompt token ids and return sampled ids
with their log-probs, which is what training needs. Chat engines (an
OpenAI-compatible API, the oracle and random reference policies) take chat
messages and return text; they serve evaluation only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    max_new_tokens: int = 128
    stop_strings: list[str] = field(default_factory=lambda: ["</answer>"])
    seed: int | None = None


@dataclass
class Generation:
    token_ids: list[int]  # sampled ids, including the stop token / string's last id
    logprobs: list[float]  # log p(id) under the sampling distribution's model (T=1 logits)
    text: str
    finish_reason: str  # "stop" (stop string), "eos", or "length"


class TokenEngine(Protocol):
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]: ...


class ChatEngine(Protocol):
    def chat(self, conversations: list[list[dict]], params: SamplingParams) -> list[str]: ...

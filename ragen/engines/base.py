"""Generation backends behind one interface.

Token engines (local transformers) take prompt token ids and return sampled ids
with their log-probs, which is what training needs. Chat engines (an
OpenAI-compatible API, the oracle and random reference policies) take chat
messages and return text; they serve evaluation only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

#: ``model.engine`` choices (``ragen.engines.compiled.make_hf_engine`` builds them): the
#: eager loop, the static step (default), the compiled step, the static step with bf16
#: matmuls and K/V (opt-in, not exact), the static step replayed as CUDA graphs on a GPU
#: (opt-in, not yet measured on one; ``ragen.engines.graphs``)
ENGINE_CHOICES = ("eager", "static", "compiled", "static-bf16", "static-graphs")


@dataclass
class SamplingParams:
    temperature: float = 1.0  # 0 = greedy (argmax)
    top_p: float = 1.0  # nucleus truncation; 1 = off
    top_k: int = 0  # 0 = off
    max_new_tokens: int = 128
    stop_strings: list[str] = field(default_factory=lambda: ["</answer>"])
    seed: int | None = None  # seeds a torch.Generator per call: same seed -> same samples
    # keep each row's K/V for a later call whose prompts extend it (an engine's prefix
    # store); False when the caller knows none will (rollout.context_window=0: every
    # prompt is a fresh system + user message), which saves copying them
    keep_kv: bool = True
    # one seed per prompt (overrides ``seed``): row i draws from its own stream, so it
    # samples the same ids in any batch, alone or on any rollout worker (engines/draws.py)
    row_seeds: list[int] | None = None


@dataclass
class Generation:
    """One sampled continuation.

    ``logprobs[i]`` is the log-prob of ``token_ids[i]`` under the temperature-scaled
    distribution BEFORE top-p / top-k truncation::

        logprobs[i] = log_softmax(logits_i / T)[token_ids[i]]      (T = 0 -> T = 1)

    The trainer recomputes exactly this quantity for the PPO ratio
    (``ragen.models.logprobs.token_logprobs``).
    """

    token_ids: list[int]  # sampled ids; a stop string's completing id / the EOS id is the last
    logprobs: list[float]  # see the class docstring; len == len(token_ids)
    text: str  # decode(token_ids, skip_special_tokens=True), nothing cut off
    finish_reason: str  # "stop" (stop string), "eos", or "length"


class TokenEngine(Protocol):
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]: ...


class ChatEngine(Protocol):
    def chat(self, conversations: list[list[dict]], params: SamplingParams) -> list[str]: ...

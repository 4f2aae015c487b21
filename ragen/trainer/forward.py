"""The two forward passes every phase of a step is made of, aligned to token positions.

``log_prob[:, t] = log p(input_ids[:, t] | input_ids[:, <t])`` and ``values[:, t]`` is
the critic's value of the prefix before token ``t`` (the state in which token ``t`` was
chosen); both are (B, T) over the training sequence.
"""

from __future__ import annotations

from typing import Any

import torch

from ragen.models.attention import training_attention
from ragen.models.logprobs import sequence_logprobs
from ragen.models.value import critic_values


def token_log_probs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float,
    response_mask: torch.Tensor,
    with_entropy: bool = False,
    **model_inputs: Any,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and entropies) of the response tokens given their prefixes.

    input_ids, attention_mask, response_mask: (B, T). Returns log_prob (B, T) and entropy
    (B, T) of the next-token distribution that chose token t, both 0 off the response.
    The distribution is softmax(logits / temperature), the one generation sampled from.
    The LM head runs only at positions that predict a response token
    (``ragen.models.logprobs.sequence_logprobs``). ``model_inputs``: a VLM's pixel
    inputs for the rows' pictures (``PhaseContext.vision_inputs``). On the CPU a
    grouped-query model's attention reads its K/V heads in place
    (``ragen.models.attention.training_attention``).
    """
    with training_attention(model):
        return sequence_logprobs(
            model,
            input_ids,
            attention_mask,
            temperature=max(temperature, 1e-6),
            positions=response_mask,
            with_entropy=with_entropy,
            **model_inputs,
        )


def token_values(
    critic: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    positions: torch.Tensor | None = None,
    **model_inputs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Critic values aligned to positions, and the value of each whole row.

    input_ids, attention_mask: (B, T), right-padded. Returns ``values`` (B, T) with
    ``values[:, t] = V(prefix before token t)``, and ``final`` (B,) = V(the whole row):
    the value of the state after the row's last token, which a truncated episode
    bootstraps from. ``positions`` (B, T): where values are wanted (the advantage
    mask); given, a prompt prefix all rows share runs once
    (``ragen.models.value.critic_values``) and ``values`` is 0 inside it.
    """
    with training_attention(critic):
        out = critic_values(critic, input_ids, attention_mask, positions, **model_inputs)
    values = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)
    values[:, 1:] = out[:, :-1]
    last = attention_mask.sum(-1).long() - 1
    final = out.gather(1, last[:, None])[:, 0]
    return values, final

"""Per-token log-probs of given ids under a causal LM: the quantity generation reports.

``Generation.logprobs`` (``ragen.engines``) and the trainer's recomputation must agree,
so both use this definition::

    logp[b, t] = log_softmax(logits[b, t-1] / T)[input_ids[b, t]]      (T = 0 -> T = 1)

i.e. the temperature-scaled distribution BEFORE any top-p / top-k truncation.
"""

from __future__ import annotations


def position_ids_from_mask(attention_mask):
    """``(B, T)`` position ids that count only attended tokens (left padding -> 0).

    A left-padded row then sees the same positions as the unpadded sequence, so its
    logits (and log-probs) match an unpadded forward pass.
    """
    positions = attention_mask.long().cumsum(-1) - 1
    return positions.clamp_(min=0)


def token_logprobs(model, input_ids, attention_mask=None, temperature: float = 1.0):
    """``(B, T)`` float32 log-probs of ``input_ids[:, t]`` given the prefix; column 0 is 0.

    ``input_ids``/``attention_mask``: ``(B, T)``, left or right padded (padded positions
    get arbitrary values; mask them). Gradients flow when called outside ``no_grad``.
    """
    import torch

    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    scale = 1.0 if not temperature else float(temperature)
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        use_cache=False,
    )
    logits = out.logits[:, :-1].float() / scale  # (B, T-1, V) predicts ids 1..T-1
    targets = input_ids[:, 1:].unsqueeze(-1)
    # log_softmax(x)[y] = x[y] - logsumexp(x), without materializing a second (B, T, V) tensor
    picked = logits.gather(-1, targets).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    return torch.nn.functional.pad(picked, (1, 0), value=0.0)

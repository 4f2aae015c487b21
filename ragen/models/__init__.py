"""Model loading, the tiny-model factory and the critic (value model).

Attributes are imported lazily so that ``import ragen.models`` (and ``ragen.models.cli``)
does not import torch or transformers.

    >>> from ragen.models import load_policy, create_tiny, create_critic
"""

from __future__ import annotations

from ragen._lazy import lazy_exports

_EXPORTS = {
    "load_policy": "loading",
    "load_tokenizer": "loading",
    "prepare_tokenizer": "loading",
    "pick_device": "loading",
    "pick_dtype": "loading",
    "count_parameters": "loading",
    "chat_template_kind": "loading",
    "create_tiny": "tiny",
    "create_critic": "value",
    "critic_values": "value",
    "load_critic": "value",
    "token_logprobs": "logprobs",
    "position_ids_from_mask": "logprobs",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, globals(), _EXPORTS)

"""The critic: the policy's transformer backbone with a scalar value head.

It is a transformers ``AutoModelForTokenClassification`` with ``num_labels=1`` (for
Qwen2, ``Qwen2ForTokenClassification``: backbone ``model`` + linear head ``score``), so
it saves and loads with ``save_pretrained`` / ``from_pretrained`` like any HF model::

    critic = create_critic("runs/tiny-small")          # or create_critic(policy_model)
    values = critic_values(critic, input_ids, attention_mask)   # (B, T) float32
    critic.save_pretrained("ckpt/critic"); critic = load_critic("ckpt/critic")

Design choices:

* The backbone starts from the policy's weights (it already understands the prompts).
* The head starts at ZERO (weight and bias), so every initial value is exactly 0. With
  V = 0, GAE's first advantages are the plain (discounted) returns instead of returns
  minus arbitrary per-token noise from a random projection of large hidden states; the
  head still receives gradients immediately (dL/dW = (V - R) h), and the backbone from
  the second step on.
* Dropout in the head is off (``classifier_dropout=0``): value targets are regressed
  in train mode, and dropout noise would just add variance to the advantages.
"""

from __future__ import annotations

import copy
import os
import sys
from typing import Any

from ragen.errors import ModelLoadError, UsageError

from .hf_setup import quiet_transformers
from .loading import load_policy, pick_device, pick_dtype
from .logprobs import (
    backbone_hidden,
    duplicate_rows,
    position_ids_from_mask,
    prefix_sharing_allowed,
    prompt_groups,
    runs_whole,
    shared_prefix_columns,
)
from .names import resolve_source
from .vlm import create_vision_critic, is_vision_config


def _is_critic_config(config) -> bool:
    archs = getattr(config, "architectures", None) or []
    return any(a.endswith("ForTokenClassification") for a in archs)


def _value_config(config):
    config = copy.deepcopy(config)
    config.num_labels = 1
    config.classifier_dropout = 0.0
    config.tie_word_embeddings = False  # no lm_head to tie
    config.problem_type = "regression"
    return config


def value_head(critic):
    """The critic's final ``nn.Linear(hidden, 1)`` (``score`` for decoder models)."""
    for name in ("score", "classifier"):
        head = getattr(critic, name, None)
        if head is not None:
            return head
    raise TypeError(f"{type(critic).__name__} has no 'score'/'classifier' head; not a critic?")


def zero_value_head(critic) -> None:
    import torch

    head = value_head(critic)
    with torch.no_grad():
        head.weight.zero_()
        if head.bias is not None:
            head.bias.zero_()


def _backbone_state_dict(policy) -> dict[str, Any]:
    """The policy backbone's weights; a PEFT-wrapped policy contributes its BASE weights.

    LoRA adapters are left out (they start at zero, so at critic creation the base
    weights are the policy's weights).
    """
    if hasattr(policy, "get_base_model"):  # peft.PeftModel
        policy = policy.get_base_model()
    backbone = getattr(policy, getattr(policy, "base_model_prefix", "model"), None)
    if backbone is None:
        raise TypeError(
            f"cannot find the transformer backbone of {type(policy).__name__}; "
            "pass the policy's folder instead"
        )
    state = {}
    for key, value in backbone.state_dict().items():
        if "lora_" in key or "modules_to_save" in key:
            continue
        state[key.replace(".base_layer.", ".")] = value
    return state


def create_critic(policy_path_or_model, device: Any = None, dtype: Any = None):
    """A value model initialized from a policy (a path or an in-memory model).

    ``policy_path_or_model``: a model folder / ``.gguf`` / hub id (see ``load_policy``),
    a saved critic folder (loaded as is, head included), or a causal-LM object (its
    weights are copied; the policy itself is not modified). The value head is zeroed
    unless it came from a saved critic. Returned in eval mode (call ``.train()``).

    ``device`` / ``dtype`` unset: for a model object, the policy's own device and dtype
    (the critic sits beside the actor it was copied from); for a path, ``auto``.
    """
    from transformers import AutoConfig, AutoModelForTokenClassification, PreTrainedModel

    policy = policy_path_or_model
    if not isinstance(policy, (str, os.PathLike)):
        first = next(iter(policy.parameters()), None) if hasattr(policy, "parameters") else None
        if first is not None:
            device = first.device if device is None else device
            dtype = first.dtype if dtype is None else dtype
    device = pick_device(device)
    dtype = pick_dtype(device, dtype)
    if isinstance(policy, (str, os.PathLike)):
        source, gguf_file, is_local = resolve_source(policy)
        if gguf_file is None:
            with quiet_transformers(progress_bars=not is_local):
                config = AutoConfig.from_pretrained(source)
                if _is_critic_config(config):
                    return load_critic(source, device=device, dtype=dtype)
            if is_vision_config(config):  # transformers has no token classifier for VLMs
                policy, _ = load_policy(source, device="cpu", dtype=dtype)
                _say("critic: the VLM's backbone with a value head initialized to zero")
                return create_vision_critic(policy, device=device, dtype=dtype)
            with quiet_transformers(progress_bars=not is_local):
                # the new head is "missing" from the policy's weights: expected, said once below
                critic = AutoModelForTokenClassification.from_pretrained(
                    source, config=_value_config(config), dtype=dtype
                )
            zero_value_head(critic)
            _say("critic: value head initialized to zero")
            return critic.to(device).eval()
        policy, _ = load_policy(policy, device="cpu", dtype=dtype)  # GGUF: via the causal LM
    if not isinstance(policy, PreTrainedModel) and not hasattr(policy, "get_base_model"):
        raise TypeError(
            f"create_critic needs a model path or a transformers model, got {type(policy).__name__}"
        )
    base = policy.get_base_model() if hasattr(policy, "get_base_model") else policy
    if is_vision_config(getattr(base, "config", None)):
        return create_vision_critic(policy, device=device, dtype=dtype)
    critic = AutoModelForTokenClassification.from_config(_value_config(base.config), dtype=dtype)
    backbone = getattr(critic, critic.base_model_prefix)
    missing, unexpected = backbone.load_state_dict(_backbone_state_dict(policy), strict=False)
    missing = [k for k in missing if "rotary_emb" not in k]  # buffers rebuilt from config
    if missing or unexpected:
        raise UsageError(
            f"policy backbone does not match the critic: missing {missing[:3]}, "
            f"unexpected {unexpected[:3]}; pass the policy's folder instead"
        )
    zero_value_head(critic)
    _say("critic: value head initialized to zero")
    return critic.to(device=device, dtype=dtype).eval()


def load_critic(path, device: Any = None, dtype: Any = None):
    """Load a critic saved with ``save_pretrained`` (value head included)."""
    from transformers import AutoModelForTokenClassification

    device = pick_device(device)
    dtype = pick_dtype(device, dtype)
    source, gguf_file, is_local = resolve_source(path)
    if gguf_file is not None:
        raise ModelLoadError(f"{path} is a GGUF policy, not a critic; use create_critic(path)")
    with quiet_transformers(progress_bars=not is_local):
        critic = AutoModelForTokenClassification.from_pretrained(source, dtype=dtype)
    return critic.to(device).eval()


def _say(message: str) -> None:
    """One line on stderr, in our words, for what transformers would report at length."""
    print(message, file=sys.stderr, flush=True)


def critic_values(
    critic, input_ids, attention_mask=None, positions=None, dedupe: bool = True, **model_inputs
):
    """``(B, T)`` float32 values, one per token: ``V[b, t]`` = value of the prefix ``<= t``.

    Position ids follow ``attention_mask`` so a left-padded row gets the same values
    as the unpadded sequence. Differentiable (no ``no_grad`` inside). ``positions``
    ``(B, T)``: the tokens whose predecessor's value is wanted (the trainer's advantage
    mask; each row's last column is always computed): given, a prompt prefix all rows
    of a right-padded batch share runs once (``ragen.models.logprobs``, "Shared prompt
    prefix") and the values inside it are 0. ``model_inputs``: a VLM's pixel inputs
    (and M-RoPE ``position_ids``), passed to the critic as they are. ``dedupe`` (with
    ``positions``): identical rows once, and rows sharing a prompt compute it once
    (``ragen.models.logprobs``, "Identical rows and identical prompts").
    """
    import torch

    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    copies = None
    if dedupe and positions is not None and not model_inputs:
        copies = duplicate_rows(input_ids, attention_mask, positions)
    if copies is not None:  # the distinct rows, then every row gathers its copy's values
        first, inverse = copies
        values = critic_values(critic, input_ids[first], attention_mask[first], positions[first])
        return values[inverse]
    if model_inputs:
        out = critic(input_ids=input_ids, attention_mask=attention_mask, **model_inputs)
        return out.logits[..., 0].float()
    sharded = getattr(critic, SHARDED_VALUES, None) if runs_whole(critic) else None
    if sharded is not None:  # FSDP gathers the root's weights around this call
        return sharded(input_ids, attention_mask, positions)
    position_ids = position_ids_from_mask(attention_mask)
    backbone, head = getattr(critic, "model", None), getattr(critic, "score", None)
    drop = getattr(critic, "dropout", None)  # the head's dropout, which the split would skip
    head_drops = critic.training and isinstance(drop, torch.nn.Dropout) and drop.p > 0
    shared, groups = 0, None
    split = backbone is not None and head is not None and not runs_whole(critic)
    if positions is not None and split and not head_drops:
        # every row's last column stays outside the prefix (its value bootstraps)
        last = int(attention_mask.sum(-1).min()) - 1
        shared = shared_prefix_columns(backbone, input_ids, attention_mask, positions, last)
        if dedupe and prefix_sharing_allowed(backbone):
            groups = prompt_groups(input_ids, attention_mask, positions, shared)
    if shared == 0 and groups is None:
        out = critic(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=False,
        )
        return out.logits.squeeze(-1).float()
    return split_values(backbone, head, input_ids, attention_mask, position_ids, shared, groups)


#: the method a sharded critic gets for its values (``ragen.distributed.fsdp``)
SHARDED_VALUES = "ragen_values"


def split_values(backbone, head, input_ids, attention_mask, position_ids, shared: int, groups=None):
    """``(B, T)`` values from the backbone (its first ``shared`` columns run once, their
    values 0; ``groups``: rows sharing a prompt, ``ragen.models.logprobs.prompt_groups``)
    and the value head: the critic's forward without head dropout."""
    import torch

    hidden = backbone_hidden(backbone, input_ids, attention_mask, position_ids, shared, groups)
    values = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)
    values[:, shared:] = head(hidden)[..., 0].float()
    return values

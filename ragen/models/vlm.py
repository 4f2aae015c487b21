"""Vision-language models (VAGEN): loading, pixel inputs, and the critic with eyes.

A VLM is any transformers image-text-to-text model with its processor: LLaVA,
Qwen2-VL / Qwen2.5-VL, Idefics3 / SmolVLM, ... ``load_policy`` (``ragen.models``)
sends a folder or hub id whose config has a ``vision_config`` here and returns
``(model, processor)``: where a text model has its tokenizer, a VLM has its processor
(``processor.tokenizer`` is the tokenizer; :func:`text_tokenizer` picks it).

Pixels are never stored as tensors in trajectories: a trajectory keeps its
observations' pictures as uint8 arrays (``Trajectory.images``, in the order their
placeholders appear in ``input_ids``) and :func:`pixel_inputs` runs the model's own
image processor on them whenever a forward pass needs them, in generation and in
the trainer alike: the same pictures through the same processor give the same
``pixel_values``, so the recomputed log-probs see exactly what generation saw.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from ragen.errors import ModelLoadError


def is_processor(obj: Any) -> bool:
    """Whether ``obj`` is a multimodal processor (an image processor + a tokenizer)."""
    return hasattr(obj, "image_processor") and hasattr(obj, "tokenizer")


def text_tokenizer(tokenizer_or_processor: Any) -> Any:
    """The tokenizer of a processor, or the tokenizer itself."""
    if is_processor(tokenizer_or_processor):
        return tokenizer_or_processor.tokenizer
    return tokenizer_or_processor


def is_vision_config(config: Any) -> bool:
    """Whether a transformers config describes a vision-language model."""
    return getattr(config, "vision_config", None) is not None


def is_vision_model(model: Any) -> bool:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return is_vision_config(getattr(base, "config", None))


def load_vlm(source: str, device, dtype, trust_remote_code: bool, local_files_only: bool | None):
    """``(model, processor)`` of an image-text-to-text model (eval mode, on ``device``)."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from .loading import prepare_tokenizer, quiet_transformers

    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code}
    if local_files_only is not None:
        kwargs["local_files_only"] = local_files_only
    try:
        with quiet_transformers():
            processor = AutoProcessor.from_pretrained(source, **kwargs)
            model = AutoModelForImageTextToText.from_pretrained(source, dtype=dtype, **kwargs)
    except (OSError, ValueError, ImportError) as err:
        raise ModelLoadError(
            f"cannot load the vision-language model {source}: {err}. Fix: the folder needs "
            "config.json, the weights and the processor files (save_pretrained of the model "
            "and of its AutoProcessor)"
        ) from err
    if not is_processor(processor):
        raise ModelLoadError(
            f"{source} has a vision config but its AutoProcessor is a "
            f"{type(processor).__name__} without an image processor; save the processor too"
        )
    tok = prepare_tokenizer(processor.tokenizer)
    model.to(device).eval()
    gen = getattr(model, "generation_config", None)
    if gen is not None and gen.pad_token_id is None:
        gen.pad_token_id = tok.pad_token_id
    return model, processor


def image_token_id(processor: Any) -> int:
    """The id an image placeholder expands to (``<image>``, ``<|image_pad|>``, ...)."""
    tid = getattr(processor, "image_token_id", None)
    if tid is None:
        tid = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
    return int(tid)


def pixel_inputs(processor: Any, images: list, device=None, dtype=None) -> dict[str, Any]:
    """The vision inputs of a forward pass over ``images`` (all pictures of a batch, in
    the order their placeholders appear row by row): the image processor's output as
    tensors, e.g. ``pixel_values`` ``(N, 3, H, W)`` for LLaVA, plus ``image_grid_thw``
    ``(N, 3)`` for Qwen2-VL. Empty dict without images. Floating tensors take ``dtype``."""
    if not images:
        return {}
    import torch

    out = processor.image_processor(images=list(images), return_tensors="pt")
    inputs = {}
    for key, value in dict(out).items():
        if not isinstance(value, torch.Tensor):
            continue
        if value.is_floating_point() and dtype is not None:
            value = value.to(dtype)
        inputs[key] = value.to(device) if device is not None else value
    return inputs


def row_images(rows_images: list[list]) -> list:
    """All pictures of a batch in order (rows' lists concatenated)."""
    return [image for row in rows_images for image in row]


def create_vision_critic(policy, device=None, dtype=None):
    """A value model with eyes: the VLM's backbone (vision tower, projector, LM) copied
    from ``policy`` plus a zero-initialized ``Linear(hidden, 1)`` head ``score``.

    ``critic(input_ids, attention_mask, pixel_values=...).logits`` is ``(B, T, 1)``: V of
    each prefix, like ``AutoModelForTokenClassification`` (which transformers does not
    define for VLMs). It is a plain ``nn.Module``: checkpoints store its state dict
    (``critic/model.safetensors``). The head starts at zero for the reason given in
    ``ragen.models.value``.
    """
    import copy

    import torch

    base = policy.get_base_model() if hasattr(policy, "get_base_model") else policy
    backbone = copy.deepcopy(getattr(base, "model", None))
    if backbone is None:
        raise TypeError(f"cannot find the backbone (.model) of {type(base).__name__}")
    hidden = base.config.get_text_config().hidden_size

    class _VisionValueModel(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = backbone
            self.score = torch.nn.Linear(hidden, 1)
            torch.nn.init.zeros_(self.score.weight)
            torch.nn.init.zeros_(self.score.bias)

        def forward(self, input_ids, attention_mask=None, **kwargs):
            kwargs.pop("use_cache", None)
            out = self.model(
                input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **kwargs
            )
            return SimpleNamespace(logits=self.score(out.last_hidden_state))

        def gradient_checkpointing_enable(self, **kwargs) -> None:
            self.model.gradient_checkpointing_enable(**kwargs)

    critic = _VisionValueModel()
    return critic.to(device=device, dtype=dtype).eval()

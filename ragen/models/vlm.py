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

Positions are the one architecture-specific part of a forward pass, and
:func:`positions_for` is the one place that knows them: plain 1-D positions counted
on the attention mask (LLaVA, Idefics3: a left-padded row sees the positions of its
unpadded self), or the 3-D M-RoPE positions of the Qwen2-VL family (``(3, B, T)``:
temporal / height / width; a picture's ids share one temporal index and walk its
grid, text after it resumes at the largest index + 1), computed by the model's own
``get_rope_index``. :func:`forward_inputs` bundles them with the pixel inputs for the
trainer and SFT; the engine's decode steps continue from :func:`next_positions`.

Qwen2-VL's ``AutoProcessor`` also builds a video processor, which needs torchvision;
without it :func:`load_processor` falls back to the same processor without videos
(:func:`image_only_processor_class`), which reads and writes standard folders.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ragen.errors import ModelLoadError

from .hf_setup import enable_activation_checkpointing, prepare_tokenizer, quiet_transformers
from .logprobs import position_ids_from_mask


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
    from transformers import AutoModelForImageTextToText

    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code}
    if local_files_only is not None:
        kwargs["local_files_only"] = local_files_only
    try:
        with quiet_transformers():
            processor = load_processor(source, **kwargs)
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


#: processors whose ``AutoProcessor`` needs a video processor (torchvision), by the
#: ``processor_class`` a folder names; their images need only the PIL image processor
VIDEO_PROCESSOR_FAMILIES = ("Qwen2VLProcessor", "Qwen2_5_VLProcessor")


def _torchvision_available() -> bool:
    from transformers.utils import is_torchvision_available

    return is_torchvision_available()


# a folder that names no processor class: the one of its model type
_PROCESSOR_OF_MODEL_TYPE = {"qwen2_vl": "Qwen2VLProcessor", "qwen2_5_vl": "Qwen2_5_VLProcessor"}


def _config_path(source: str, name: str, **kwargs) -> str | None:
    """The local path of file ``name`` of a folder or hub id (from the cache), or None."""
    from transformers.utils import cached_file

    return cached_file(
        source,
        name,
        _raise_exceptions_for_missing_entries=False,
        _raise_exceptions_for_connection_errors=False,
        local_files_only=kwargs.get("local_files_only", False),
    )


def _read_config(source: str, name: str, **kwargs) -> dict:
    """JSON file ``name`` of a folder or hub id; ``{}`` where it has none."""
    path = _config_path(source, name, **kwargs)
    return json.loads(Path(path).read_text(encoding="utf-8")) if path else {}


def _processor_class_name(source: str, **kwargs) -> str | None:
    """The ``processor_class`` a folder or hub id names (``processor_config.json``, or the
    older ``preprocessor_config.json`` / ``tokenizer_config.json``), else the processor
    of its ``config.json`` model type, else ``None``."""
    for name in ("processor_config.json", "preprocessor_config.json", "tokenizer_config.json"):
        found = _read_config(source, name, **kwargs).get("processor_class")
        if found:
            return found
    return _PROCESSOR_OF_MODEL_TYPE.get(
        _read_config(source, "config.json", **kwargs).get("model_type")
    )


def image_only_processor_class(name: str = "Qwen2VLProcessor"):
    """``name`` (a Qwen2-VL-family processor class of transformers) without its video
    processor: the same tokenizer, image processor, image-token expansion and chat
    template, built and loaded without torchvision.

    The class keeps transformers' name so that ``save_pretrained`` writes a standard
    folder (``processor_class: Qwen2VLProcessor``). That folder has no video processor
    config, which ``AutoProcessor`` demands where torchvision is installed, so
    :func:`load_processor` loads it with this class there too (transformers 5.17 on an
    H200 machine with torchvision raised "Can't load video processor" before).
    Videos are not supported (``videos=`` raises)."""
    import transformers
    from transformers.processing_utils import ProcessorMixin

    if name not in VIDEO_PROCESSOR_FAMILIES:
        raise ValueError(f"no image-only variant of {name}; known: {VIDEO_PROCESSOR_FAMILIES}")
    if name in _IMAGE_ONLY:
        return _IMAGE_ONLY[name]
    base = getattr(transformers, name)

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        # what the base __init__ sets before ProcessorMixin's (which would demand a
        # video processor): the placeholder tokens and their ids
        self.image_token = getattr(tokenizer, "image_token", None) or "<|image_pad|>"
        self.video_token = getattr(tokenizer, "video_token", None) or "<|video_pad|>"
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
        self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
        ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

    def __call__(self, images=None, text=None, videos=None, **kwargs):
        if videos is not None:
            raise ValueError(
                f"this {name} was loaded without its video processor (torchvision is not "
                "installed, or its folder has no video processor config): it takes images "
                "only. Fix: pip install torchvision and load a folder saved with the video "
                "processor (e.g. the hub's) for videos"
            )
        return base.__call__(self, images=images, text=text, **kwargs)

    cls = type(name, (base,), {"__init__": __init__, "__call__": __call__})
    cls.__qualname__ = name
    cls.__module__ = __name__
    _IMAGE_ONLY[name] = cls
    return cls


_IMAGE_ONLY: dict[str, type] = {}


def load_processor(source: str, **kwargs):
    """``AutoProcessor.from_pretrained(source)``; for a Qwen2-VL-family folder that cannot
    give the video processor ``AutoProcessor`` would build (torchvision is missing, or the
    folder holds no video processor config, as one saved by the image-only class), the
    same processor without videos (:func:`image_only_processor_class`) instead of
    transformers' ImportError/OSError."""
    from transformers import AutoProcessor

    name = _processor_class_name(source, **kwargs)
    if name in VIDEO_PROCESSOR_FAMILIES and not (
        _torchvision_available() and _has_video_processor_config(source, **kwargs)
    ):
        return image_only_processor_class(name).from_pretrained(source, **kwargs)
    return AutoProcessor.from_pretrained(source, **kwargs)


def _has_video_processor_config(source: str, **kwargs) -> bool:
    """Whether ``source`` holds what transformers' video processor loads from: a
    ``video_preprocessor_config.json``, a ``processor_config.json`` with a
    ``video_processor`` entry, or the older shared ``preprocessor_config.json``."""
    if "video_processor" in _read_config(source, "processor_config.json", **kwargs):
        return True
    return any(
        _config_path(source, name, **kwargs)
        for name in ("video_preprocessor_config.json", "preprocessor_config.json")
    )


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


def _rope_index_fn(model: Any):
    """The model's ``get_rope_index`` (M-RoPE: the Qwen2-VL family), or ``None``.

    Looks through a PEFT wrapper, the ``...ForConditionalGeneration`` head and the
    vision critic of :func:`create_vision_critic` (whose ``.model`` is the backbone)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    for owner in (base, getattr(base, "model", None)):
        fn = getattr(owner, "get_rope_index", None)
        if fn is not None:
            return fn
    return None


def uses_mrope(model: Any) -> bool:
    """Whether ``model`` takes 3-D M-RoPE position ids (Qwen2-VL, Qwen2.5-VL)."""
    return _rope_index_fn(model) is not None


def positions_for(model: Any, input_ids, attention_mask, vision: dict | None = None):
    """The position ids a forward pass of ``model`` over these rows needs.

    input_ids, attention_mask: ``(B, T)``, left or right padded. ``vision``: the
    :func:`pixel_inputs` of the rows' pictures (``image_grid_thw`` gives each picture's
    grid). Returns ``(B, T)`` positions counted on the mask for plain models, and
    ``(3, B, T)`` M-RoPE positions (``model.get_rope_index``; padding gets 0) for the
    Qwen2-VL family, in which a picture's ``h x w`` merged patches take positions
    ``(s, s + i, s + j)`` and the text after it resumes at ``s + max(h, w)``.
    """

    rope_index = _rope_index_fn(model)
    if rope_index is None:
        return position_ids_from_mask(attention_mask)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(base, "config", None)
    image_id = getattr(config, "image_token_id", None)
    if image_id is None:  # the vision critic: the backbone's config
        image_id = base.model.config.image_token_id
    # token types the processor would return: text 0, image 1 (videos are not supported)
    types = (input_ids == int(image_id)).int()
    grid = (vision or {}).get("image_grid_thw")
    positions, _ = rope_index(
        input_ids, mm_token_type_ids=types, image_grid_thw=grid, attention_mask=attention_mask
    )
    return positions


def next_positions(position_ids):
    """``(B,)`` position of the token that follows each row: its largest position + 1
    (the attended-token count for 1-D positions; ``max + 1`` of every axis for M-RoPE,
    where text continues after the last picture on all three axes)."""
    flat = position_ids if position_ids.dim() == 2 else position_ids.amax(dim=0)
    return flat.amax(dim=-1) + 1


def step_positions(position_ids, next_position):
    """Position ids of one decode step for rows at ``next_position`` ``(B,)``: ``(B, 1)``,
    or ``(3, B, 1)`` when the prefill's ``position_ids`` were M-RoPE's ``(3, B, T)``."""
    step = next_position.unsqueeze(-1)
    return step.unsqueeze(0).expand(3, -1, -1) if position_ids.dim() == 3 else step


def forward_inputs(model: Any, processor: Any, input_ids, attention_mask, images: list, dtype=None):
    """Every input of a training forward pass besides the ids and mask: the
    :func:`pixel_inputs` of ``images`` (all pictures of the rows, in order) and, for an
    M-RoPE model, its ``position_ids`` (:func:`positions_for`). Empty without pictures
    (text rows take the plain positions the callers compute from the mask)."""
    if not images:
        return {}
    vision = pixel_inputs(processor, images, input_ids.device, dtype)
    if uses_mrope(model):
        vision["position_ids"] = positions_for(model, input_ids, attention_mask, vision)
    return vision


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

        def gradient_checkpointing_enable(self) -> None:
            enable_activation_checkpointing(self.model)

    critic = _VisionValueModel()
    return critic.to(device=device, dtype=dtype).eval()

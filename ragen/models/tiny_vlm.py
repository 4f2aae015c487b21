"""A tiny, randomly initialized vision-language model for tests and the CPU (VAGEN side).

    >>> from ragen.models.tiny_vlm import create_tiny_vlm
    >>> path = create_tiny_vlm("runs/tiny-vlm")          # offline, a few seconds
    >>> model, processor = ragen.models.load_policy(path)  # LlavaForConditionalGeneration

A standard transformers architecture, so everything downstream is what a real VLM
goes through: **LLaVA** (``LlavaForConditionalGeneration``) = a CLIP vision encoder,
a 2-layer projector, and the tiny Qwen2 LM of ``ragen.models.tiny`` with its
tokenizer plus one special ``<image>`` token. Saved in HF format with a
``LlavaProcessor`` whose image processor is the PIL one (``LlavaImageProcessorPil``:
no torchvision needed), so ``AutoProcessor`` / ``AutoModelForImageTextToText`` load
the folder.

``architecture="idefics3"`` builds the same thing in SmolVLM's family instead
(``Idefics3ForConditionalGeneration``, PIL ``Idefics3ImageProcessorPil``): each picture
becomes ``<fake_token_around_image><global-img>`` + 9 ``<image>`` ids +
``<fake_token_around_image>``; the tests run the token-exactness checks on both.

``architecture="qwen2_vl"`` (``Qwen2VLForConditionalGeneration``) and ``"qwen2_5_vl"``
(``Qwen2_5_VLForConditionalGeneration``) build it in the family VAGEN trains: a
Qwen2-VL vision tower (14-pixel patches, 2x2 of them merged into one id: 9
``<|image_pad|>`` ids per 84x84 picture, inside ``<|vision_start|>`` ...
``<|vision_end|>``) and the tiny LM with 3-D M-RoPE positions
(``ragen.models.vlm.positions_for``). The processor is ``Qwen2VLProcessor`` with the PIL
``Qwen2VLImageProcessorPil`` and no video processor
(``ragen.models.vlm.image_only_processor_class``: the video one needs torchvision); the
folder names the standard class, so ``AutoProcessor`` loads it where torchvision is
installed and ``ragen.models.load_policy`` everywhere.

Why LLaVA by default: it is the simplest of the four (plain 1-D positions, its
processor loads with ``AutoProcessor`` alone), and one ``<image>`` becomes a fixed
number of ids, one per patch, ``(image_size / patch_size)**2``: 36 for the default 84x84
input with 14-pixel patches, one patch per cell of ``sokoban_visual`` (a 6x6 room of
14-pixel cells). Images are resized to ``image_size`` (``frozen_lake_visual``'s 4x4 map
of 21-pixel cells is already 84x84).

The chat template is ChatML that accepts string or list content (``{"type": "image"}``
renders ``<image>``, ``{"type": "text"}`` its text), so it places one image per
observation. Deterministic: the same arguments write byte-identical weights.
"""

from __future__ import annotations

import json
from pathlib import Path

from ragen.errors import ConfigError, UsageError

from .hf_setup import quiet_transformers
from .tiny import DEFAULT_SIZE, PRESETS, build_tokenizer, tiny_qwen2_config
from .vlm import image_only_processor_class

IMAGE_TOKEN = "<image>"
IMAGE_SIZE = 84  # pixels; the processor resizes every picture to IMAGE_SIZE x IMAGE_SIZE
PATCH_SIZE = 14  # one patch per 14-pixel cell of sokoban_visual

# CLIP vision encoders, by LM size (tiny on purpose: a 6x6 grid of coloured squares)
VISION_PRESETS = {
    "nano": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2),
    "micro": dict(
        hidden_size=96, intermediate_size=192, num_hidden_layers=2, num_attention_heads=3
    ),
    "small": dict(
        hidden_size=128, intermediate_size=256, num_hidden_layers=3, num_attention_heads=4
    ),
    "base": dict(
        hidden_size=192, intermediate_size=384, num_hidden_layers=4, num_attention_heads=6
    ),
}

# ChatML with list content: a text part renders its text, an image part the image token
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}{{ '<image>' }}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def image_tokens_per_image(image_size: int = IMAGE_SIZE, patch_size: int = PATCH_SIZE) -> int:
    """Ids one ``<image>`` expands to: one per patch (CLS is dropped, strategy "default")."""
    return (image_size // patch_size) ** 2


# ChatML as above, in Qwen2-VL's words: an image part is <|vision_start|><|image_pad|>
# <|vision_end|> (the processor expands <|image_pad|> to one id per merged patch)
QWEN2_VL_CHAT_TEMPLATE = CHAT_TEMPLATE.replace(
    "{{ '<image>' }}", "{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
)

#: the architecture families ``create_tiny_vlm`` builds
ARCHITECTURES = ("llava", "idefics3", "qwen2_vl", "qwen2_5_vl")
QWEN2_VL_FAMILY = ("qwen2_vl", "qwen2_5_vl")
# Qwen2-VL's vision special tokens, in the order of its vocabulary
_QWEN2_VL_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
QWEN2_VL_IMAGE_TOKEN = "<|image_pad|>"
QWEN2_VL_MERGE_SIZE = 2  # 2x2 patches -> one id (the merger), as in Qwen2-VL
QWEN2_VL_PROCESSORS = {"qwen2_vl": "Qwen2VLProcessor", "qwen2_5_vl": "Qwen2_5_VLProcessor"}
# Idefics3 (SmolVLM's family) writes each image as <fake_token_around_image><global-img>
# <image>*n<fake_token_around_image>; its encoder merges scale_factor**2 patches per id
_IDEFICS3_TOKENS = ("<fake_token_around_image>", "<global-img>", "<end_of_utterance>")
IDEFICS3_SCALE_FACTOR = 2


def _check_architecture(architecture: str) -> None:
    if architecture not in ARCHITECTURES:
        raise ConfigError(
            f"unknown tiny VLM architecture {architecture!r}; choose one of {', '.join(ARCHITECTURES)}"
        )


def image_tokens_for(architecture: str, image_size: int = IMAGE_SIZE, patch_size: int = PATCH_SIZE):
    """Image ids per picture: one per patch (LLaVA), one per 2x2 patches (Idefics3,
    Qwen2-VL)."""
    _check_architecture(architecture)
    n = image_tokens_per_image(image_size, patch_size)
    if architecture == "llava":
        return n
    merge = QWEN2_VL_MERGE_SIZE if architecture in QWEN2_VL_FAMILY else IDEFICS3_SCALE_FACTOR
    return n // merge**2


def build_processor(
    image_size: int = IMAGE_SIZE, patch_size: int = PATCH_SIZE, architecture: str = "llava"
):
    """The tiny tokenizer (+ the image tokens) and a PIL-backed image processor of
    ``architecture`` (``LlavaProcessor``, ``Idefics3Processor`` or ``Qwen2VLProcessor`` /
    ``Qwen2_5_VLProcessor`` without videos)."""
    from tokenizers import AddedToken

    _check_architecture(architecture)
    tokenizer = build_tokenizer("chatml")
    if architecture in QWEN2_VL_FAMILY:
        added = _QWEN2_VL_TOKENS
    else:
        added = (IMAGE_TOKEN, *(_IDEFICS3_TOKENS if architecture == "idefics3" else ()))
    tokenizer.add_tokens(
        [AddedToken(t, special=True, normalized=False) for t in added], special_tokens=True
    )
    if architecture in QWEN2_VL_FAMILY:
        return _qwen2_vl_processor(tokenizer, image_size, patch_size, architecture)
    tokenizer.chat_template = CHAT_TEMPLATE
    if architecture == "idefics3":
        from transformers import Idefics3Processor
        from transformers.models.idefics3.image_processing_pil_idefics3 import (
            Idefics3ImageProcessorPil,
        )

        image_processor = Idefics3ImageProcessorPil(
            do_image_splitting=False,  # one 84x84 picture, no tiles
            size={"longest_edge": image_size},
            max_image_size={"longest_edge": image_size},
            image_mean=[0.5, 0.5, 0.5],
            image_std=[0.5, 0.5, 0.5],
        )
        return Idefics3Processor(
            image_processor=image_processor,
            tokenizer=tokenizer,
            image_seq_len=image_tokens_for("idefics3", image_size, patch_size),
            chat_template=CHAT_TEMPLATE,
        )
    from transformers import LlavaProcessor
    from transformers.models.llava.image_processing_pil_llava import LlavaImageProcessorPil

    image_processor = LlavaImageProcessorPil(
        size={"height": image_size, "width": image_size},
        do_resize=True,
        do_center_crop=False,
        do_pad=False,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )
    return LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=patch_size,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,  # CLIP's CLS, dropped by "default"
        image_token=IMAGE_TOKEN,
        chat_template=CHAT_TEMPLATE,
    )


def _qwen2_vl_processor(tokenizer, image_size: int, patch_size: int, architecture: str):
    """Qwen2-VL's processor over the tiny tokenizer: every picture resized to
    ``image_size`` squared (``min_pixels == max_pixels``), cut into ``patch_size`` patches
    (two temporal copies, as Qwen2-VL does for stills) and 2x2-merged into one id each."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    if image_size % (patch_size * QWEN2_VL_MERGE_SIZE):
        raise ConfigError(
            f"image_size {image_size} must be a multiple of patch_size * {QWEN2_VL_MERGE_SIZE} "
            f"= {patch_size * QWEN2_VL_MERGE_SIZE} for {architecture}"
        )
    tokenizer.chat_template = QWEN2_VL_CHAT_TEMPLATE
    image_processor = Qwen2VLImageProcessorPil(
        min_pixels=image_size * image_size,
        max_pixels=image_size * image_size,
        patch_size=patch_size,
        temporal_patch_size=2,
        merge_size=QWEN2_VL_MERGE_SIZE,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )
    cls = image_only_processor_class(QWEN2_VL_PROCESSORS[architecture])
    return cls(
        image_processor=image_processor, tokenizer=tokenizer, chat_template=QWEN2_VL_CHAT_TEMPLATE
    )


def _mrope_section(head_dim: int) -> list[int]:
    """Qwen2-VL's split of the rotary frequencies over (temporal, height, width): its
    [16, 24, 24] of 64 (2:3:3), scaled to ``head_dim / 2`` frequencies."""
    half = head_dim // 2
    t = half // 4
    h = (half - t) // 2
    return [t, h, half - t - h]


def _build_qwen2_vl(text_config, tok, size: str, patch_size: int, architecture: str):
    """A randomly initialized Qwen2-VL / Qwen2.5-VL on the tiny LM ``text_config``."""
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
    )

    preset = VISION_PRESETS[size]
    text = text_config.to_dict()
    head_dim = text_config.hidden_size // text_config.num_attention_heads
    text["rope_parameters"] = {
        "rope_type": "default",
        "rope_theta": 1e6,
        "mrope_section": _mrope_section(head_dim),
    }
    ids = {
        "image_token_id": tok.convert_tokens_to_ids("<|image_pad|>"),
        "video_token_id": tok.convert_tokens_to_ids("<|video_pad|>"),
        "vision_start_token_id": tok.convert_tokens_to_ids("<|vision_start|>"),
        "vision_end_token_id": tok.convert_tokens_to_ids("<|vision_end|>"),
    }
    common = dict(
        patch_size=patch_size,
        spatial_merge_size=QWEN2_VL_MERGE_SIZE,
        temporal_patch_size=2,
        depth=preset["num_hidden_layers"],
        num_heads=preset["num_attention_heads"],
    )
    if architecture == "qwen2_vl":
        vision = dict(
            embed_dim=preset["hidden_size"],
            hidden_size=text_config.hidden_size,  # the merger's output: the LM width
            mlp_ratio=preset["intermediate_size"] // preset["hidden_size"],
            **common,
        )
        config = Qwen2VLConfig(
            text_config=text, vision_config=vision, tie_word_embeddings=True, **ids
        )
        return Qwen2VLForConditionalGeneration(config)
    vision = dict(
        hidden_size=preset["hidden_size"],
        intermediate_size=preset["intermediate_size"],
        out_hidden_size=text_config.hidden_size,
        window_size=112,  # 4x4 merged patches: one window covers a 6x6-patch picture
        fullatt_block_indexes=[preset["num_hidden_layers"] - 1],
        **common,
    )
    config = Qwen2_5_VLConfig(
        text_config=text, vision_config=vision, tie_word_embeddings=True, **ids
    )
    return Qwen2_5_VLForConditionalGeneration(config)


def build_vlm(
    size: str,
    processor,
    seed: int = 0,
    image_size: int = IMAGE_SIZE,
    patch_size: int = PATCH_SIZE,
    architecture: str = "llava",
):
    """A randomly initialized ``LlavaForConditionalGeneration`` (or Idefics3's, Qwen2-VL's,
    Qwen2.5-VL's ``...ForConditionalGeneration``) whose LM is the tiny preset ``size``."""
    import torch
    from transformers import (
        CLIPVisionConfig,
        GenerationConfig,
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        LlavaConfig,
        LlavaForConditionalGeneration,
    )

    tok = processor.tokenizer
    eos_ids = [tok.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")]
    text_config = tiny_qwen2_config(size, tok, eos_ids[0])
    torch.manual_seed(seed)
    if architecture in QWEN2_VL_FAMILY:
        model = _build_qwen2_vl(text_config, tok, size, patch_size, architecture)
        model.generation_config = GenerationConfig(
            eos_token_id=eos_ids, pad_token_id=tok.pad_token_id
        )
        return model.eval()
    if architecture == "idefics3":
        config = Idefics3Config(
            vision_config=dict(
                image_size=image_size, patch_size=patch_size, **VISION_PRESETS[size]
            ),
            text_config=text_config.to_dict(),
            scale_factor=IDEFICS3_SCALE_FACTOR,
            image_token_id=tok.convert_tokens_to_ids(IMAGE_TOKEN),
            tie_word_embeddings=True,
            pad_token_id=tok.pad_token_id,
        )
        model = Idefics3ForConditionalGeneration(config)
        model.generation_config = GenerationConfig(
            eos_token_id=eos_ids, pad_token_id=tok.pad_token_id
        )
        return model.eval()
    vision_config = CLIPVisionConfig(
        image_size=image_size, patch_size=patch_size, projection_dim=64, **VISION_PRESETS[size]
    )
    config = LlavaConfig(
        vision_config=vision_config,
        text_config=text_config,
        image_token_index=tok.convert_tokens_to_ids(IMAGE_TOKEN),
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
        projector_hidden_act="gelu",
        tie_word_embeddings=True,
    )
    model = LlavaForConditionalGeneration(config)
    model.generation_config = GenerationConfig(eos_token_id=eos_ids, pad_token_id=tok.pad_token_id)
    return model.eval()


def create_tiny_vlm(
    out_dir: str | Path,
    size: str = "nano",
    seed: int = 0,
    image_size: int = IMAGE_SIZE,
    patch_size: int = PATCH_SIZE,
    architecture: str = "llava",
) -> Path:
    """Build a tiny LLaVA + processor and save them (HF format) to ``out_dir``; return it.

    Offline and deterministic. ``size`` picks the LM (``ragen.models.tiny.PRESETS``) and
    a matching vision encoder (:data:`VISION_PRESETS`); default ``nano`` (the tests').
    ``architecture``: ``llava`` (default), ``idefics3`` (SmolVLM's family: a SigLIP-style
    encoder whose 2x2 patches merge into one id, 9 ids per 84x84 picture), ``qwen2_vl``
    or ``qwen2_5_vl`` (VAGEN's family: 9 ids per picture, M-RoPE positions).
    """
    _check_architecture(architecture)
    if size not in PRESETS:
        raise ConfigError(f"unknown tiny model size {size!r}; choose one of {', '.join(PRESETS)}")
    if image_size % patch_size:
        raise ConfigError(f"image_size {image_size} must be a multiple of patch_size {patch_size}")
    out = Path(out_dir).expanduser()
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} exists and is not a folder. Fix: pick another --out")
    out.mkdir(parents=True, exist_ok=True)
    processor = build_processor(image_size, patch_size, architecture)
    model = build_vlm(size, processor, seed, image_size, patch_size, architecture)
    with quiet_transformers():
        model.save_pretrained(out)
        processor.save_pretrained(out)
    n_params = sum(p.numel() for p in model.parameters())
    info = {
        "architecture": architecture,
        "size": size,
        "seed": seed,
        "image_size": image_size,
        "patch_size": patch_size,
        "image_tokens_per_image": image_tokens_for(architecture, image_size, patch_size),
        "num_parameters": n_params,
    }
    (out / "ragen_tiny_vlm.json").write_text(json.dumps(info, indent=2) + "\n")
    return out


DEFAULT_VLM_SIZE = "nano"
__all__ = ["ARCHITECTURES", "DEFAULT_SIZE", "DEFAULT_VLM_SIZE", "build_processor", "build_vlm"]
__all__ += ["create_tiny_vlm", "image_tokens_for"]

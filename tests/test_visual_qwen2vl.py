"""The Qwen2-VL family (VAGEN's VLMs): M-RoPE positions, the processor without
torchvision, and TRICO end to end on the tiny Qwen2-VL (the checks shared with LLaVA and
Idefics3 run on Qwen2-VL and Qwen2.5-VL in test_visual_vlm.py)."""

import json

import numpy as np
import pytest
import torch
from test_visual_trico import _overrides
from transformers.utils import is_torchvision_available

from ragen.cli import main
from ragen.engines.base import SamplingParams
from ragen.engines.hf_vlm import HFVLMEngine
from ragen.models import load_policy
from ragen.models.logprobs import position_ids_from_mask, sequence_logprobs
from ragen.models.tiny_vlm import image_tokens_for
from ragen.models.vlm import (
    forward_inputs,
    load_processor,
    next_positions,
    pixel_inputs,
    positions_for,
    uses_mrope,
)


@pytest.fixture(scope="module")
def qwen(tiny_qwen2vl_dir):
    return load_policy(tiny_qwen2vl_dir, device="cpu")


def _picture(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (84, 84, 3), dtype=np.uint8)


def _prompt(processor, n_images: int, text: str = "go left") -> list[int]:
    entry = "<|vision_start|><|image_pad|><|vision_end|>"
    images = [_picture(k) for k in range(n_images)]
    out = processor(text=[f"<|im_start|>user\n{entry * n_images}{text}"], images=[images] or None)
    return [int(i) for i in out["input_ids"][0]], images


def test_the_processor_loads_without_torchvision_and_saves_a_standard_folder(
    qwen, tiny_qwen2vl_dir, tmp_path
):
    _, processor = qwen
    assert type(processor).__name__ == "Qwen2VLProcessor"  # transformers' name and behaviour
    if not is_torchvision_available():  # with it, transformers picks its torchvision twin
        assert type(processor.image_processor).__name__ == "Qwen2VLImageProcessorPil"
    assert not hasattr(processor, "video_processor")
    with pytest.raises(ValueError, match="without its video processor"):
        processor(text=["<|video_pad|>"], videos=[np.zeros((2, 84, 84, 3), np.uint8)])
    processor.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "processor_config.json").read_text())
    assert saved["processor_class"] == "Qwen2VLProcessor"
    again = load_processor(str(tmp_path))
    ids, images = _prompt(again, 2)
    assert ids == _prompt(processor, 2)[0]
    assert ids.count(processor.image_token_id) == 2 * image_tokens_for("qwen2_vl") == 18


def test_mrope_positions_walk_the_picture_grid_and_ignore_left_padding(qwen):
    model, processor = qwen
    assert uses_mrope(model)
    ids, images = _prompt(processor, 1)
    row = torch.tensor([ids])
    vision = pixel_inputs(processor, images)
    pos = positions_for(model, row, torch.ones_like(row), vision)  # (3, 1, T)
    assert pos.shape == (3, 1, len(ids))
    image = row[0] == processor.image_token_id
    start = int(pos[0, 0, image].min())
    # 84x84 -> 6x6 patches -> 3x3 merged ids: t fixed, (h, w) = start + (i, j)
    grid = torch.arange(3) + start
    assert torch.equal(pos[0, 0, image], torch.full((9,), start))
    assert torch.equal(pos[1, 0, image], grid.repeat_interleave(3))
    assert torch.equal(pos[2, 0, image], grid.repeat(3))
    after = int(image.nonzero().max()) + 1  # <|vision_end|>: text resumes at max + 1
    assert torch.equal(pos[:, 0, after], torch.full((3,), start + 3))
    assert int(next_positions(pos)) == int(pos.max()) + 1 < len(ids)  # fewer than 1-D ones
    # a left-padded batch: each row keeps the positions of its unpadded self
    short, _ = _prompt(processor, 1, "up")
    width = len(ids)
    padded = torch.tensor([ids, [0] * (width - len(short)) + short])
    mask = torch.tensor([[1] * width, [0] * (width - len(short)) + [1] * len(short)])
    both = positions_for(model, padded, mask, pixel_inputs(processor, images + images))
    assert torch.equal(both[:, :1], pos)
    alone = positions_for(model, torch.tensor([short]), torch.ones(1, len(short)), vision)
    assert torch.equal(both[:, 1:, width - len(short) :], alone)
    # plain models keep the mask-counted 1-D positions
    assert not uses_mrope(torch.nn.Linear(1, 1))
    assert torch.equal(
        positions_for(torch.nn.Linear(1, 1), padded, mask), position_ids_from_mask(mask)
    )


def test_generation_logprobs_need_and_match_the_mrope_positions(qwen):
    model, processor = qwen
    engine = HFVLMEngine(model, processor)
    prompts = [_prompt(processor, 2)[0], _prompt(processor, 1, "up")[0]]
    images = [[_picture(0), _picture(1)], [_picture(0)]]
    params = SamplingParams(temperature=1.0, max_new_tokens=6, stop_strings=[], seed=3)
    gens = engine.generate(prompts, params, images=images)  # batched, left-padded
    for prompt, pics, gen in zip(prompts, images, gens):
        ids = torch.tensor([prompt + gen.token_ids])
        ones = torch.ones_like(ids)
        mask = torch.zeros_like(ids)
        mask[0, len(prompt) :] = 1
        with torch.no_grad():
            vision = forward_inputs(model, processor, ids, ones, pics)
            lp, _ = sequence_logprobs(model, ids, ones, 1.0, mask, **vision)
            flat, _ = sequence_logprobs(
                model, ids, ones, 1.0, mask, **pixel_inputs(processor, pics)
            )
        got = torch.tensor(gen.logprobs)
        assert torch.allclose(lp[0, len(prompt) :], got, atol=1e-5)
        assert not torch.allclose(flat[0, len(prompt) :], got, atol=1e-5)  # 1-D would be off


def test_older_hub_layouts_load_and_torchvision_gets_the_full_processor(
    qwen, tmp_path, monkeypatch
):
    """A folder in the pre-v5 hub layout (``preprocessor_config.json``, the chat template
    in ``chat_template.json``, no processor class in the tokenizer config) loads the
    image-only way too, also when only ``config.json`` names the family; with
    torchvision present, ``AutoProcessor`` is left to do its own work."""
    import ragen.models.vlm as vlm

    model, processor = qwen
    processor.tokenizer.save_pretrained(tmp_path)
    processor.image_processor.save_pretrained(tmp_path)
    model.config.save_pretrained(tmp_path)
    (tmp_path / "chat_template.jinja").unlink(missing_ok=True)
    (tmp_path / "chat_template.json").write_text(
        json.dumps({"chat_template": processor.chat_template})
    )
    for name in ("preprocessor_config.json", "tokenizer_config.json"):
        config = json.loads((tmp_path / name).read_text())
        config.pop("processor_class", None)
        config.pop("chat_template", None)
        (tmp_path / name).write_text(json.dumps(config))
    loaded = load_processor(str(tmp_path))  # the family from config.json's model type
    assert type(loaded).__name__ == "Qwen2VLProcessor"
    assert loaded.chat_template == processor.chat_template
    assert _prompt(loaded, 1)[0] == _prompt(processor, 1)[0]
    calls = []
    monkeypatch.setattr(vlm, "_torchvision_available", lambda: True)
    monkeypatch.setattr(
        "transformers.AutoProcessor.from_pretrained", lambda src, **kw: calls.append(src)
    )
    load_processor(str(tmp_path))
    assert calls == [str(tmp_path)]


def test_a_folder_without_a_video_processor_loads_image_only_where_torchvision_is(
    qwen, tmp_path, monkeypatch
):
    """A folder saved by the image-only processor (the tiny models, checkpoints written
    without torchvision) has no video processor config; ``AutoProcessor`` would raise
    "Can't load video processor" where torchvision is installed (seen on a GPU machine),
    so it loads image-only there too. A folder with a video processor config gets
    ``AutoProcessor``."""
    import ragen.models.vlm as vlm

    _, processor = qwen
    processor.save_pretrained(tmp_path)
    calls = []
    monkeypatch.setattr(vlm, "_torchvision_available", lambda: True)
    monkeypatch.setattr(
        "transformers.AutoProcessor.from_pretrained", lambda src, **kw: calls.append(src)
    )
    loaded = load_processor(str(tmp_path))
    assert calls == [] and type(loaded).__name__ == "Qwen2VLProcessor"
    assert _prompt(loaded, 1)[0] == _prompt(processor, 1)[0]
    (tmp_path / "video_preprocessor_config.json").write_text("{}")
    load_processor(str(tmp_path))
    assert calls == [str(tmp_path)]


def test_train_trico_on_qwen2_vl_then_eval_and_sft(tiny_qwen2vl_dir, tmp_path):
    run = tmp_path / "run"
    assert main(["train", *_overrides(tiny_qwen2vl_dir, run, "sokoban_visual")]) == 0
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2]
    assert "critic/value_loss" in lines[-1] and "val/success_rate" in lines[-1]
    assert all(m["actor/gen_logprob_max_diff"] < 1e-5 for m in lines)  # M-RoPE both sides
    assert lines[-1]["rollout/context_inexact"] == 0
    ckpt = run / "checkpoints" / "step_000002"
    from transformers import AutoModelForImageTextToText

    AutoModelForImageTextToText.from_pretrained(ckpt / "actor")
    assert type(load_processor(str(ckpt / "actor"))).__name__ == "Qwen2VLProcessor"
    out = tmp_path / "eval"
    assert main(["eval", "--model", str(ckpt), "--env", "sokoban_visual", "--n", "2",
                 "--out", str(out)]) == 0  # fmt: skip
    assert json.loads((out / "metrics.json").read_text())
    sft = tmp_path / "sft"
    assert main(["sft", "--model", tiny_qwen2vl_dir, "--env", "sokoban_visual", "--episodes",
                 "4", "--epochs", "1", "--batch-size", "4", "--out", str(sft)]) == 0  # fmt: skip
    history = [json.loads(x) for x in (sft / "sft_metrics.jsonl").read_text().splitlines()]
    assert history and all(h["loss"] == h["loss"] for h in history)  # finite, not NaN

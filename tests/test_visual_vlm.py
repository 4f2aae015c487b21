"""VLMs end to end below the trainer: the tiny LLaVA, Idefics3 and Qwen2-VL,
processor-exact ids, masks, pixels (and Qwen2-VL's M-RoPE positions)."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers.utils import is_torchvision_available

from ragen.agent import EnvStateManager, ModelPolicy, RolloutConfig, run_rollout
from ragen.agent.visual_context import VisionChatFormat
from ragen.engines.base import SamplingParams
from ragen.engines.hf_vlm import HFVLMEngine, engine_for
from ragen.models import load_policy
from ragen.models.logprobs import sequence_logprobs
from ragen.models.tiny_vlm import create_tiny_vlm, image_tokens_for, image_tokens_per_image
from ragen.models.vlm import forward_inputs, load_processor

FAMILIES = ["llava", "idefics3", "qwen2_vl", "qwen2_5_vl"]
FIXTURES = {
    "llava": "tiny_vlm_dir",
    "idefics3": "tiny_idefics3_dir",
    "qwen2_vl": "tiny_qwen2vl_dir",
    "qwen2_5_vl": "tiny_qwen2_5vl_dir",
}


@pytest.fixture(scope="module")
def tiny_qwen2_5vl_dir(tmp_path_factory):
    """The tiny Qwen2.5-VL (Qwen2-VL's processor and M-RoPE, its own vision tower)."""
    out = tmp_path_factory.mktemp("tiny_qwen2_5vl") / "nano"
    return str(create_tiny_vlm(out, seed=0, architecture="qwen2_5_vl"))


@pytest.fixture(scope="module", params=FAMILIES)
def vlm(request):
    """Each architecture family the tiny VLM is built in (the checks run on each)."""
    folder = request.getfixturevalue(FIXTURES[request.param])
    model, processor = load_policy(folder, device="cpu")
    model.ragen_family = request.param
    return model, processor


@pytest.fixture(scope="module")
def visual_rollout(vlm):
    model, processor = vlm
    policy = ModelPolicy(HFVLMEngine(model, processor), processor)
    manager = EnvStateManager("sokoban_visual", env_groups=2, group_size=2, seed=0)
    config = RolloutConfig(max_turns=3, max_new_tokens=16, max_actions_per_turn=1)
    return run_rollout(policy, manager, config, manager.seeds_for_step(0)), policy


@pytest.mark.parametrize("family", FAMILIES)
def test_tiny_vlm_is_a_standard_deterministic_hf_folder(family, tmp_path, request):
    from transformers import AutoModelForImageTextToText

    folder = Path(request.getfixturevalue(FIXTURES[family]))
    model = AutoModelForImageTextToText.from_pretrained(folder)
    processor = load_processor(str(folder))  # AutoProcessor (Qwen2-VL: without videos)
    expected = {
        "llava": "LlavaForConditionalGeneration",
        "idefics3": "Idefics3ForConditionalGeneration",
        "qwen2_vl": "Qwen2VLForConditionalGeneration",
        "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
    }
    assert type(model).__name__ == expected[family]
    if not is_torchvision_available():  # the PIL processor: no torchvision needed
        assert type(processor.image_processor).__name__.endswith("Pil")
    info = json.loads((folder / "ragen_tiny_vlm.json").read_text())
    assert info["image_tokens_per_image"] == image_tokens_for(family)
    assert image_tokens_for("llava") == image_tokens_per_image() == 36  # a patch per cell
    again = create_tiny_vlm(tmp_path / "again", seed=0, architecture=family)
    for name in ("model.safetensors", "tokenizer.json"):
        assert (again / name).read_bytes() == (folder / name).read_bytes()


def _segments(ids, mask):
    """Maximal runs of template (mask 0) ids: ``[(start, end)]``."""
    runs, start = [], None
    for i, m in enumerate([*mask, 1]):
        if m == 0 and start is None:
            start = i
        elif m == 1 and start is not None:
            runs.append((start, i))
            start = None
    return runs


def test_trained_ids_are_the_processors_ids_plus_the_sampled_ids(vlm, visual_rollout):
    _, processor = vlm
    result, policy = visual_rollout
    fmt = policy._ragen_chat_formats["auto"]
    assert isinstance(fmt, VisionChatFormat) and fmt.strategy == "delta"
    image_id, per_image = fmt.image_token_id, image_tokens_for(vlm[0].ragen_family)
    assert result.stats["context_inexact"] == 0
    for traj in result.trajectories:
        ids, mask = np.array(traj.input_ids), np.array(traj.response_mask)
        assert traj.context_exact and len(traj.images) == traj.num_turns
        assert (ids == image_id).sum() == per_image * len(traj.images)
        assert not ((ids == image_id) & (mask == 1)).any()  # M_loss never on a picture
        # every template segment is exactly what the processor makes of its text + pictures
        used = 0
        for start, end in _segments(traj.input_ids, traj.response_mask):
            seg = traj.input_ids[start:end]
            n_images = int(np.sum(np.diff(np.r_[0, np.array(seg) == image_id]) == 1))
            text = fmt.decode(seg)
            out = processor(
                text=[text], images=traj.images[used : used + n_images] or None,
                add_special_tokens=False,
            )  # fmt: skip
            assert out["input_ids"][0] == seg
            used += n_images
        assert used == len(traj.images)
        # each turn's sampled ids end at a turn end, followed by template ids (or the end)
        assert all(
            mask[e] == 1 and (e + 1 == len(mask) or mask[e + 1] == 0) for e in traj.turn_ends
        )


def test_generation_logprobs_are_recomputed_with_the_same_pixels(vlm, visual_rollout):
    model, processor = vlm
    result, _ = visual_rollout
    traj = result.trajectories[0]
    ids = torch.tensor([traj.input_ids])
    mask = torch.tensor([traj.response_mask])
    ones = torch.ones_like(ids)
    vision = forward_inputs(model, processor, ids, ones, traj.images)  # + M-RoPE positions
    pixels = vision["pixel_values"]  # LLaVA (N, 3, H, W); Idefics3 (1, N, 3, H, W)
    if "image_grid_thw" in vision:  # Qwen2-VL: (patches of all pictures, 3 * 2 * 14 * 14)
        assert len(vision["image_grid_thw"]) == len(traj.images)
    else:
        assert pixels.shape[:-3].numel() == len(traj.images)
    with torch.no_grad():
        lp, _ = sequence_logprobs(model, ids, ones, 1.0, mask, **vision)
    gen = torch.tensor([traj.gen_logprobs])
    assert torch.allclose(lp * mask, gen * mask, atol=1e-5)
    # the pictures matter: other pictures give other log-probs
    other = forward_inputs(model, processor, ids, ones, [255 - im for im in traj.images])
    with torch.no_grad():
        lp_other, _ = sequence_logprobs(model, ids, torch.ones_like(ids), 1.0, mask, **other)
    assert not torch.allclose(lp_other * mask, gen * mask, atol=1e-4)


def test_bounded_image_history_with_a_context_window(vlm):
    model, processor = vlm
    policy = ModelPolicy(engine_for(model, processor), processor)
    manager = EnvStateManager("frozen_lake_visual", env_groups=1, group_size=2, seed=0)
    config = RolloutConfig(max_turns=4, max_new_tokens=8, context_window=1)
    result = run_rollout(policy, manager, config, manager.seeds_for_step(0))
    image_id = policy._ragen_chat_formats["auto"].image_token_id
    assert result.trajectories
    for traj in result.trajectories:  # turn t sees turn t-1's picture and its own
        assert len(traj.images) == min(traj.turn_index + 1, 2)
        per_image = image_tokens_for(model.ragen_family)
        assert traj.input_ids.count(image_id) == per_image * len(traj.images)


def test_batched_generation_with_pictures_matches_one_row_at_a_time(vlm, visual_rollout):
    model, processor = vlm
    engine = HFVLMEngine(model, processor)
    traj = next(t for t in visual_rollout[0].trajectories if len(t.turn_ends) >= 2)
    starts = [
        i
        for i in range(1, len(traj.input_ids))
        if traj.response_mask[i] > traj.response_mask[i - 1]
    ]
    # turn 1's prompt (one picture) and turn 2's (two pictures): rows of different lengths
    prompts = [traj.input_ids[: starts[0]], traj.input_ids[: starts[1]]]
    images = [traj.images[:1], traj.images[:2]]
    params = SamplingParams(temperature=0.0, max_new_tokens=6, stop_strings=[])
    together = engine.generate(prompts, params, images=images)
    for prompt, pics, gen in zip(prompts, images, together):
        alone = engine.generate([prompt], params, images=[pics])[0]
        assert gen.token_ids == alone.token_ids
        assert np.allclose(gen.logprobs, alone.logprobs, atol=1e-4)
    with pytest.raises(ValueError, match="pictures but no image ids"):
        engine.generate([[5, 6, 7]], params, images=[images[0]])


def test_a_text_model_on_a_visual_env_fails_with_the_fix(tiny_model_dir):
    from ragen.engines.hf import HFEngine
    from ragen.errors import ConfigError

    model, tok = load_policy(tiny_model_dir, device="cpu")
    manager = EnvStateManager("sokoban_visual", env_groups=1, group_size=1, seed=0)
    with pytest.raises(ConfigError, match="vision-language model"):
        run_rollout(
            ModelPolicy(HFEngine(model, tok), tok), manager, RolloutConfig(max_turns=1),
            manager.seeds_for_step(0),
        )  # fmt: skip

"""TRICO end to end on real rollouts: a visual env with the tiny VLM and a text env."""

import json
from pathlib import Path

import pytest
import torch

from ragen.cli import main
from ragen.models.tiny_vlm import image_tokens_for
from ragen.trainer.config import load_config
from ragen.trainer.starpo import StarPOTrainer


def _overrides(model_dir, run_dir, env, algo="trico", steps=2, extra=()):
    return [
        f"env={env}",
        f"algo={algo}",
        f"model.path={model_dir}",
        "model.device=cpu",  # the checks below are float32-exact; CUDA would autocast bf16
        "model.actor_lr=1e-3",
        "model.critic_lr=1e-3",
        "rollout.env_groups=2",
        "rollout.group_size=2",
        "rollout.max_turns=3",
        "rollout.max_new_tokens=12",
        "rollout.max_model_len=2048",
        "algo.ppo_mini_batch_size=2",
        f"trainer.total_steps={steps}",
        "trainer.val_every=2",
        "trainer.val_groups=2",
        "trainer.save_every=2",
        "trainer.console=false",
        f"trainer.run_dir={run_dir}",
        *extra,
    ]


@pytest.mark.parametrize(
    "env,model", [("sokoban_visual", "vlm"), ("sokoban_visual", "qwen2_vl"), ("sokoban", "lm")]
)
def test_trico_turn_rewards_sit_on_turn_ends_and_masked_tokens_get_no_advantage(
    env, model, tmp_path, request
):
    fixture = {"vlm": "tiny_vlm_dir", "qwen2_vl": "tiny_qwen2vl_dir", "lm": "tiny_model_dir"}
    path = request.getfixturevalue(fixture[model])
    cfg = load_config(_overrides(path, tmp_path / "run", env, steps=1))
    trainer = StarPOTrainer(cfg)
    result = trainer.rollout(trainer.train_envs, trainer.train_envs.seeds_for_step(0), 1.0, 7)
    trajectories = [t for t in result.trajectories if t.num_response_tokens > 0]
    batch = trainer.prepare_batch(trajectories)
    metrics: dict[str, float] = {}
    trainer.compute_old_log_probs(batch, metrics)
    trainer.compute_values(batch)
    trainer.compute_advantages(batch, metrics)
    # generation and the trainer saw the same inputs (pixels included)
    assert metrics["actor/gen_logprob_max_diff"] < 1e-5
    for i, traj in enumerate(trajectories):
        scores = batch.token_level_scores[i]
        expected = torch.zeros_like(scores)
        expected[traj.turn_ends] = torch.tensor(traj.turn_rewards)
        assert torch.equal(scores, expected)  # each turn's reward on its end token, only there
        assert len(traj.turn_ends) == traj.num_turns == len(traj.turn_rewards)
        off = batch.response_mask[i] == 0  # prompt, observations, pictures, padding
        assert torch.all(batch.advantages[i][off] == 0)
        assert torch.all(batch.returns[i][off] == 0)
        assert torch.all(batch.advantages[i][~off] != 0)  # the rewards reach every response token
        if model != "lm":
            image_id = trainer.engine.image_token_id
            on_images = batch.input_ids[i] == image_id
            per_image = image_tokens_for("llava" if model == "vlm" else model)
            assert on_images.sum() == per_image * traj.num_turns
            assert not torch.any(batch.response_mask[i][on_images])  # M_loss
            assert not torch.any(batch.advantage_mask[i][on_images])  # M_adv


def test_train_trico_on_a_visual_env_then_eval_the_checkpoint(tiny_vlm_dir, tmp_path):
    run = tmp_path / "run"
    assert main(["train", *_overrides(tiny_vlm_dir, run, "sokoban_visual")]) == 0
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2]
    assert "critic/value_loss" in lines[-1] and "val/success_rate" in lines[-1]
    assert lines[-1]["actor/gen_logprob_max_diff"] < 1e-4
    assert lines[-1]["rollout/context_inexact"] == 0
    ckpt = run / "checkpoints" / "step_000002"
    from safetensors.torch import load_file
    from transformers import AutoModelForImageTextToText, AutoProcessor

    AutoModelForImageTextToText.from_pretrained(ckpt / "actor")
    AutoProcessor.from_pretrained(ckpt / "actor")
    before = load_file(str(Path(tiny_vlm_dir) / "model.safetensors"))
    after = load_file(str(ckpt / "actor" / "model.safetensors"))
    assert any(not torch.equal(before[k], after[k]) for k in before)
    out = tmp_path / "eval"
    assert main(["eval", "--model", str(ckpt), "--env", "sokoban_visual", "--n", "2",
                 "--out", str(out)]) == 0  # fmt: skip
    assert json.loads((out / "metrics.json").read_text())


def test_sft_builds_expert_trajectories_with_pictures(tiny_vlm_dir, tmp_path):
    from ragen.models import load_policy
    from ragen.sft.config import SFTConfig
    from ragen.sft.expert_data import make_expert_data

    _, processor = load_policy(tiny_vlm_dir, device="cpu")
    cfg = SFTConfig(env="frozen_lake_visual", episodes=4, epochs=1, batch_size=4)
    data = make_expert_data(processor, cfg)
    image_id = processor.tokenizer.convert_tokens_to_ids("<image>")
    for traj in data:
        assert traj.images and traj.input_ids.count(image_id) == 36 * len(traj.images)
        assert traj.context_exact
    out = tmp_path / "sft"
    assert main(["sft", "--model", tiny_vlm_dir, "--env", "sokoban_visual", "--episodes", "4",
                 "--epochs", "1", "--batch-size", "4", "--out", str(out)]) == 0  # fmt: skip
    history = [json.loads(x) for x in (out / "sft_metrics.jsonl").read_text().splitlines()]
    assert history and all(h["loss"] == h["loss"] for h in history)  # finite, not NaN
    from transformers import AutoModelForImageTextToText

    AutoModelForImageTextToText.from_pretrained(out)

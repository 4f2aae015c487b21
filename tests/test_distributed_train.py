"""`ragen train` with 2 rollout workers x 2 training ranks: it runs, its checkpoints are
the usual HF folders, and resuming one onto 1 worker x 1 rank continues exactly."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

ray = pytest.importorskip("ray")

from ragen.cli import main  # noqa: E402


def _args(model_dir, run_dir, workers, ranks, *extra):
    return [
        "train",
        "env=sokoban",
        "algo=starpo-s",
        f"model.path={model_dir}",
        "model.actor_lr=1e-3",
        "model.critic_lr=1e-3",
        "rollout.env_groups=3",
        "rollout.group_size=2",
        "rollout.max_turns=2",
        "rollout.max_new_tokens=12",
        "rollout.max_model_len=1024",
        "algo.filter.value=1.0",
        "algo.ppo_mini_batch_size=4",
        "trainer.total_steps=2",
        "trainer.save_every=1",
        "trainer.val_every=0",
        "trainer.reasoning_samples=0",
        "trainer.console=false",
        "trainer.tensorboard=false",
        f"trainer.run_dir={run_dir}",
        f"trainer.rollout_workers={workers}",
        f"trainer.train_ranks={ranks}",
        "trainer.worker_batch_groups=2",  # units [0, 1] and [2]: both workers play
        *extra,
    ]


def _weights(checkpoint, part):
    return load_file(str(Path(checkpoint) / part / "model.safetensors"))


def test_workers_and_ranks_train_save_and_resume_onto_fewer(local_ray, tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    run = tmp_path / "scaled"
    assert main(_args(tiny_model_dir, run, 2, 2)) == 0
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in lines if "event" not in m]
    assert [m["step"] for m in steps] == [1, 2]
    assert all(m["scale/update_ranks"] == 2.0 for m in steps)
    assert steps[0]["scale/state_broadcast"] == 1.0 and steps[1]["scale/state_broadcast"] == 0.0
    assert steps[0]["scale/weight_sync_s"] > 0 and steps[1]["scale/weight_sync_s"] > 0
    # step 2 was sampled by the updated weights: the trainer's recomputed log-probs agree
    assert steps[1]["actor/gen_logprob_max_diff"] < 1e-4
    last = run / "checkpoints" / "step_000002"
    model = AutoModelForCausalLM.from_pretrained(last / "actor")  # a plain HF folder
    assert sum(p.numel() for p in model.parameters()) > 0

    # resume step 1 of that run on 1 worker and 1 rank: step 2 comes out the same
    resumed = tmp_path / "resumed"
    step1 = run / "checkpoints" / "step_000001"
    assert main(_args(tiny_model_dir, resumed, 1, 1, f"trainer.resume={step1}")) == 0
    again = resumed / "checkpoints" / "step_000002"
    for part in ("actor", "critic"):
        a, b = _weights(last, part), _weights(again, part)
        assert a.keys() == b.keys()
        for key in a:
            assert torch.allclose(a[key], b[key], atol=1e-6), (part, key)
    # and the update really moved the weights (the comparison is not trivial)
    first = _weights(step1, "actor")
    assert any(not torch.equal(first[k], _weights(last, "actor")[k]) for k in first)

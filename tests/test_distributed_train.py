"""`ragen train` scaled out: 2 rollout workers x 2 replicated ranks, and 2 FSDP2-sharded
ranks + 1 worker (full fine-tuning, and LoRA), write the usual HF folders and match the
one-process run (sampling is seeded per episode, so all of them play the same
episodes); a sharded run's checkpoint resumes in one process to the same weights."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

ray = pytest.importorskip("ray")

from ragen.cli import main  # noqa: E402


def _args(model_dir, run_dir, workers, ranks, *extra, algo="starpo-s"):
    return [
        "train",
        "env=sokoban",
        f"algo={algo}",
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
        "trainer.worker_batch_groups=1",  # a cap: groups one at a time, same samples
        *extra,
    ]


def _weights(checkpoint, part, file="model.safetensors"):
    return load_file(str(Path(checkpoint) / part / file))


def _assert_close(a_dir, b_dir, parts, atol, file="model.safetensors"):
    for part in parts:
        a, b = _weights(a_dir, part, file), _weights(b_dir, part, file)
        assert a.keys() == b.keys()
        for key in a:
            gap = float((a[key] - b[key]).abs().max())
            assert gap <= atol, (part, key, gap)


def _steps(run):
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [m for m in lines if "event" not in m]


@pytest.fixture(scope="module")
def one_process(tiny_model_dir, tmp_path_factory):
    """The 2-step run in one process that every scaled-out run is compared with."""
    run = tmp_path_factory.mktemp("one") / "run"
    assert main(_args(tiny_model_dir, run, 0, 1)) == 0
    return run


def _same_samples_and_update(steps, steps_one):
    for m, m1 in zip(steps, steps_one, strict=True):  # entropy of the sampled ids, ...
        for key in ("actor/entropy", "actor/grad_norm_mean", "critic/value_loss"):
            assert m[key] == pytest.approx(m1[key], rel=1e-4), key


def test_replicated_workers_and_ranks_match_one_process(
    local_ray, tiny_model_dir, tmp_path, one_process
):
    from transformers import AutoModelForCausalLM

    run = tmp_path / "scaled"
    assert main(_args(tiny_model_dir, run, 2, 2)) == 0
    steps = _steps(run)
    assert [m["step"] for m in steps] == [1, 2]
    assert all(m["scale/update_ranks"] == 2.0 and m["scale/busy_workers"] == 2.0 for m in steps)
    assert steps[0]["scale/state_broadcast"] == 1.0 and steps[1]["scale/state_broadcast"] == 0.0
    assert steps[0]["scale/weight_sync_s"] > 0 and steps[1]["scale/weight_sync_s"] > 0
    # step 2 was sampled by the updated weights: the trainer's recomputed log-probs agree
    assert steps[1]["actor/gen_logprob_max_diff"] < 1e-4
    _same_samples_and_update(steps, _steps(one_process))
    last = run / "checkpoints" / "step_000002"
    model = AutoModelForCausalLM.from_pretrained(last / "actor")  # a plain HF folder
    assert sum(p.numel() for p in model.parameters()) > 0
    # one process scores in the update's forward and runs identical prompts once
    # (ragen.trainer.onepass, "Identical prompts"); the ranks score apart: float rounding
    _assert_close(
        one_process / "checkpoints" / "step_000002", last, ("actor", "critic"), SHARDED_ATOL
    )
    # and the updates really moved the weights (the comparison is not trivial)
    first = _weights(run / "checkpoints" / "step_000001", "actor")
    assert any(not torch.allclose(first[k], _weights(last, "actor")[k], atol=1e-4) for k in first)


def test_one_local_worker_plays_in_the_trainer_process():
    """1 worker on a local CPU machine plays what the trainer would, later: not started,
    and the log says so; with a cluster, or sharded ranks, it is."""
    from ragen.distributed.scale_out import plan
    from ragen.trainer.config import load_config

    base = ["env=sokoban", "model=tiny", "trainer.rollout_workers=1"]
    workers, ranks, notes = plan(load_config(base), "cpu")
    assert (workers, ranks) == (0, 1) and "rollouts run in the trainer process" in notes[0]
    assert plan(load_config([*base, "trainer.ray_address=10.0.0.5:6379"]), "cpu")[0] == 1
    sharded = [*base, "trainer.train_ranks=2", "trainer.train_sharding=fsdp"]
    assert plan(load_config(sharded), "cpu")[:2] == (1, 2)
    assert plan(load_config(base), "cuda")[0] == 1


# Sharded ranks run a prompt prefix shared by their micro-batch's rows once only when
# scoring, and the ranks agree on the shortest (ragen.distributed.fsdp.agreed_prefix);
# one process runs the whole micro-batch's prefix once, also in the update: the same
# numbers within float rounding, summed in another order, which AdamW (lr 1e-3 here)
# turns into weight differences of ~1e-5 after a step. A scale or sharding error moves
# weights by ~1e-3.
SHARDED_ATOL = 5e-5


@pytest.mark.slow
def test_fsdp_ranks_match_one_process_and_resume_onto_one_rank(
    local_ray, tiny_model_dir, tmp_path, one_process
):
    sharded = tmp_path / "fsdp"
    assert main(_args(tiny_model_dir, sharded, 1, 2, "trainer.train_sharding=fsdp")) == 0
    steps = _steps(sharded)
    assert all(m["scale/update_ranks"] == 2.0 for m in steps)
    _same_samples_and_update(steps, _steps(one_process))
    assert steps[1]["actor/gen_logprob_max_diff"] < 1e-4  # the worker got the gathered weights
    last = sharded / "checkpoints" / "step_000002"
    _assert_close(
        one_process / "checkpoints" / "step_000002", last, ("actor", "critic"), SHARDED_ATOL
    )
    # a sharded checkpoint is a one-process checkpoint: resume step 1 on one rank
    resumed = tmp_path / "resumed"
    step1 = sharded / "checkpoints" / "step_000001"
    assert main(_args(tiny_model_dir, resumed, 0, 1, f"trainer.resume={step1}")) == 0
    _assert_close(last, resumed / "checkpoints" / "step_000002", ("actor", "critic"), SHARDED_ATOL)


@pytest.mark.slow
def test_fsdp_with_lora_matches_one_process(local_ray, tiny_model_dir, tmp_path):
    """LoRA adapters sharded with their frozen base; KL against the adapters-off
    reference (GRPO's 0.001), no critic; one step."""
    lora = ("model.lora.rank=4", "algo.ppo_mini_batch_size=6", "trainer.total_steps=1")
    one = tmp_path / "one"
    assert main(_args(tiny_model_dir, one, 0, 1, *lora, algo="grpo")) == 0
    sharded = tmp_path / "fsdp"
    args = _args(tiny_model_dir, sharded, 1, 2, *lora, "trainer.train_sharding=fsdp", algo="grpo")
    assert main(args) == 0
    a, b = one / "checkpoints" / "step_000001", sharded / "checkpoints" / "step_000001"
    _assert_close(a, b, ("actor_adapter",), SHARDED_ATOL, file="adapter_model.safetensors")
    _assert_close(a, b, ("actor",), SHARDED_ATOL)  # the merged HF folder
    adapters = _weights(b, "actor_adapter", "adapter_model.safetensors")
    assert adapters and all("lora_" in k for k in adapters)
    before = _weights(a, "actor_adapter", "adapter_model.safetensors")
    assert any(v.abs().max() > 0 for k, v in before.items() if "lora_B" in k)  # it trained

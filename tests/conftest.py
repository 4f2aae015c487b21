"""Shared fixtures: one nano tiny model per test session, built offline."""

import os

import pytest

# Keep tests on one thread per process: deterministic and polite on a 2-core machine.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """Path of a nano tiny model (random Qwen2 + BPE tokenizer with a ChatML template)."""
    import torch

    torch.set_num_threads(1)
    from ragen.models.tiny import create_tiny

    out = tmp_path_factory.mktemp("tiny") / "nano"
    create_tiny(out, size="nano", seed=0)
    return str(out)


@pytest.fixture(scope="session")
def tiny_vlm_dir(tmp_path_factory):
    """Path of the tiny VLM (LLaVA: CLIP encoder + nano Qwen2, PIL image processor)."""
    import torch

    torch.set_num_threads(1)
    from ragen.models.tiny_vlm import create_tiny_vlm

    return str(create_tiny_vlm(tmp_path_factory.mktemp("tiny_vlm") / "nano", seed=0))


@pytest.fixture(scope="session")
def tiny_idefics3_dir(tmp_path_factory):
    """The tiny VLM in SmolVLM's family (Idefics3: 9 image ids per picture)."""
    from ragen.models.tiny_vlm import create_tiny_vlm

    out = tmp_path_factory.mktemp("tiny_idefics3") / "nano"
    return str(create_tiny_vlm(out, seed=0, architecture="idefics3"))


@pytest.fixture(scope="session")
def tiny_qwen2vl_dir(tmp_path_factory):
    """The tiny VLM in VAGEN's family (Qwen2-VL: 9 image ids per picture, M-RoPE)."""
    from ragen.models.tiny_vlm import create_tiny_vlm

    out = tmp_path_factory.mktemp("tiny_qwen2vl") / "nano"
    return str(create_tiny_vlm(out, seed=0, architecture="qwen2_vl"))


@pytest.fixture
def one_bandit_step(tiny_model_dir, tmp_path):
    """``ragen train`` overrides of one tiny GRPO step on the bandit (2 x 2 episodes, no
    validation) into ``tmp_path/run``: the smallest whole training run."""
    return [
        "env=bandit",
        "model=tiny",
        f"model.path={tiny_model_dir}",
        "algo=grpo",
        "rollout.env_groups=2",
        "rollout.group_size=2",
        "algo.ppo_mini_batch_size=4",
        "trainer.total_steps=1",
        "trainer.val_every=0",
        f"trainer.run_dir={tmp_path / 'run'}",
    ]


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray for one test module (2 cores here; CPUs are logical slots), shut down
    afterwards so that its idle processes do not follow the rest of the suite."""
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        os.environ.setdefault("RAY_worker_niceness", "0")  # as ragen.distributed.ray_setup
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()


# The tests that start Ray clusters or torch.distributed groups run on one pytest-xdist
# worker, one after another (`make test` runs `-n auto --dist loadgroup`): with two
# workers' Ray-actor ranks at once, gloo can break a sharded optimizer-state gather
# ("Connection closed by peer").
SERIAL_GROUP = "ray_and_torch_distributed"
SERIAL_MODULES = {
    "test_distributed_fsdp.py",
    "test_distributed_rollout.py",
    "test_distributed_train.py",
    "test_distributed_update.py",
    "test_ray_cluster.py",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SERIAL_MODULES:
            item.add_marker(pytest.mark.xdist_group(SERIAL_GROUP))

"""A refactor changes no behaviour: seeded runs still give the recorded metrics.

Three tiny seeded runs (the nano model; an RL run with a critic, an RL run with LoRA
adapters and GRPO, an SFT run with LoRA) are held against the metrics recorded in
``tests/fixtures/seeded_metrics.json``. A change that moves code without meaning to
change what it computes must leave them as they were; a change that means to (a new
default, another sampling order) re-records them, and says so in its commit:

    .venv/bin/python tests/test_seeded_golden.py --record

On the machine and torch version that recorded them the values are equal to the last
bit (the check is exact there); another CPU's BLAS kernels round differently, so
elsewhere floats are held to a relative 1e-5 (a changed behaviour moves them by far
more) and integers, counts and flags stay exact. Timing fields are left out.
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import pytest
import torch

from ragen.agent.rollout import RolloutConfig
from ragen.sft.config import SFTConfig
from ragen.sft.trainer import run_sft
from ragen.trainer.config import load_config
from ragen.trainer.starpo import StarPOTrainer

GOLDEN = Path(__file__).parent / "fixtures" / "seeded_metrics.json"
#: fields that measure time, not behaviour
TIMING = ("time", "timing/", "perf/", "elapsed_s")


def _rl_overrides(model_dir: str, run_dir: Path, algo: str, extra: tuple[str, ...]) -> list:
    return [
        "env=sokoban",
        f"algo={algo}",
        f"model.path={model_dir}",
        "model.device=cpu",  # bit-identical repeats are a CPU promise
        "model.actor_lr=1e-3",
        "model.critic_lr=1e-3",
        "rollout.env_groups=2",
        "rollout.group_size=2",
        "rollout.max_turns=2",
        "rollout.max_new_tokens=12",
        "rollout.max_model_len=1024",
        "algo.ppo_mini_batch_size=2",
        "algo.micro_token_budget=8192",  # not "auto": free memory differs between machines
        "trainer.total_steps=2",
        "trainer.val_every=2",
        "trainer.val_groups=2",
        "trainer.save_every=0",
        "trainer.console=false",
        f"trainer.run_dir={run_dir}",
        *extra,
    ]


def _without_timing(record: dict) -> dict:
    return {k: v for k, v in record.items() if not k.startswith(TIMING)}


def _lines(path: Path) -> list[dict]:
    return [_without_timing(json.loads(x)) for x in path.read_text().splitlines()]


def run_rl(model_dir: str, out: Path, algo: str, extra: tuple[str, ...] = ()) -> list[dict]:
    StarPOTrainer(load_config(_rl_overrides(model_dir, out, algo, extra))).train()
    return _lines(out / "metrics.jsonl")


def run_sft_lora(model_dir: str, out: Path) -> list[dict]:
    cfg = SFTConfig(
        env="sokoban",
        episodes=8,
        heldout_episodes=4,
        epochs=1,
        batch_size=4,
        lr=3e-3,
        lora_rank=4,
        micro_token_budget=16384,  # not "auto": free memory differs between machines
        seed=3,
        rollout=RolloutConfig(max_turns=2),
    )
    folder = run_sft(model_dir, out, cfg, log=lambda *_: None, device="cpu")
    return _lines(folder / "sft_metrics.jsonl")


RUNS = {
    "rl_starpo_critic": lambda d, out: run_rl(d, out, "starpo"),
    "rl_grpo_lora": lambda d, out: run_rl(d, out, "grpo", ("model.lora.rank=4",)),
    "sft_lora": run_sft_lora,
}


def _where() -> dict:
    return {"torch": torch.__version__, "machine": platform.machine(), "cpu": _cpu_name()}


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _same(a, b, exact: bool) -> bool:
    if isinstance(a, float) and isinstance(b, float) and not exact:
        return a == pytest.approx(b, rel=1e-5, abs=1e-8)
    return a == b


@pytest.mark.parametrize("name", sorted(RUNS))
def test_seeded_run_gives_the_recorded_metrics(name, tiny_model_dir, tmp_path):
    golden = json.loads(GOLDEN.read_text())
    if golden["recorded_on"]["torch"] != torch.__version__:
        pytest.skip(f"recorded with torch {golden['recorded_on']['torch']}")
    exact = golden["recorded_on"] == _where()
    got = RUNS[name](tiny_model_dir, tmp_path / name)
    want = golden["runs"][name]
    assert [sorted(r) for r in got] == [sorted(r) for r in want], "other metric names"
    for step, (g, w) in enumerate(zip(got, want)):
        differ = {k: (g[k], w[k]) for k in w if not _same(g[k], w[k], exact)}
        assert not differ, f"{name}, record {step}: (now, recorded) {differ}"


def _record() -> None:
    """Run every seeded run and write their metrics to the golden file."""
    import tempfile

    from ragen.models.tiny import create_tiny

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = str(Path(tmp) / "nano")
        create_tiny(model_dir, size="nano", seed=0)
        runs = {name: run(model_dir, Path(tmp) / name) for name, run in sorted(RUNS.items())}
    GOLDEN.write_text(json.dumps({"recorded_on": _where(), "runs": runs}, indent=1) + "\n")
    print(f"wrote {GOLDEN}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: python tests/test_seeded_golden.py --record")
    import os

    os.environ.setdefault("OMP_NUM_THREADS", "1")  # as tests/conftest.py
    _record()

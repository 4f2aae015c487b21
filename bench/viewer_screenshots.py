"""The screenshots of docs/VIEWER.md, taken by headless Chromium from runs made here.

    .venv/bin/python -m bench.viewer_screenshots            # writes docs/images/viewer_*.png
    .venv/bin/python -m bench.viewer_screenshots --out /tmp/shots

Runs (a few minutes of CPU in all):

* a real training run with a rollback: the nano tiny model fine-tuned on the bandit
  oracle's replies for a few seconds, then GRPO with thresholds no run stays under (the
  forced warnings of tests/test_trainer_collapse.py) and ``on_collapse=rollback``;
* ``ragen eval`` of the oracle on FrozenLake with ``grounding_world_modeling`` replies
  and ``--epsilon 0.2`` (the lake slips: some predictions miss);
* the oracle, tokenized with the tiny VLM's processor, on ``sokoban_visual``;
* the synthetic run of ``ragen.viewer.synthetic`` (40 steps x 64 episodes): thoughts of
  varied words, validation states, a rollback's branch.

Needs Chromium + chromedriver (``apt-get install chromium chromium-driver``, or
``RAGEN_CHROMIUM`` / ``RAGEN_CHROMEDRIVER``) and selenium. Pictures are cut to the part each section of the doc shows and reduced to 64
colours to keep them small.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

FORCE = [
    "trainer.collapse.signals=[grad_norm,entropy,group_reward_std,mutual_info]",
    "trainer.collapse.window=1",
    "trainer.collapse.min_drop=0",
    "trainer.collapse.entropy_ratio=0.9999999",
    "trainer.collapse.group_std_ratio=0.9999999",
    "trainer.collapse.mutual_info_ratio=0.9999999",
    "trainer.collapse.grad_norm_spike=1.0000001",
    "trainer.collapse.grad_norm_history=1",
    "trainer.collapse.min_steps=4",
]


def make_runs(tmp: Path) -> dict[str, Path]:
    from ragen.agent import EnvStateManager, RolloutConfig, run_rollout
    from ragen.agent.evaluate import write_results
    from ragen.agent.policies import OraclePolicy
    from ragen.cli import main
    from ragen.models.tiny import create_tiny
    from ragen.models.tiny_vlm import create_tiny_vlm
    from ragen.models.vlm import load_processor
    from ragen.sft.config import SFTConfig
    from ragen.sft.trainer import run_sft
    from ragen.viewer.synthetic import synthesize

    runs = {}
    create_tiny(tmp / "nano", size="nano", seed=0)
    cfg = SFTConfig(env="bandit", rollout=RolloutConfig(max_turns=1), episodes=48, epochs=6)
    cfg.batch_size, cfg.lr = 8, 3e-3
    warm = run_sft(str(tmp / "nano"), tmp / "warm", cfg, log=lambda *_: None)
    runs["rollback"] = tmp / "rollback-run"
    args = ["train", "env=bandit", "algo=grpo", f"model.path={warm}", "model.actor_lr=1e-3"]
    args += ["rollout.env_groups=4", "rollout.group_size=2", "rollout.max_new_tokens=24"]
    args += ["algo.ppo_mini_batch_size=8", "trainer.total_steps=10", "trainer.val_every=2"]
    args += ["trainer.val_groups=8", "trainer.save_every=2", "trainer.console=false"]
    args += ["trainer.tensorboard=false", "trainer.reasoning_samples=4"]
    args += ["trainer.on_collapse=rollback", "trainer.max_rollbacks=2"]
    assert main([*args, f"trainer.run_dir={runs['rollback']}", *FORCE]) == 0
    runs["oracle"] = tmp / "oracle-eval"
    args = ["eval", "--model", "oracle", "--env", "frozen_lake", "--n", "16"]
    args += ["--reasoning", "grounding_world_modeling", "--epsilon", "0.2"]
    assert main([*args, "--out", str(runs["oracle"])]) == 0
    vlm = create_tiny_vlm(tmp / "vlm", seed=0)
    manager = EnvStateManager("sokoban_visual", env_groups=2, group_size=1, seed=0)
    policy = OraclePolicy(epsilon=0.3, tokenizer=load_processor(str(vlm)))
    result = run_rollout(policy, manager, RolloutConfig(max_turns=4), manager.seeds_for_step(0))
    runs["visual"] = write_results(
        tmp / "visual-eval", result.trajectories, {}, {"env": "sokoban_visual"}
    )
    runs["synthetic"] = tmp / "synthetic-run"
    synthesize(runs["synthetic"], steps=40, episodes=64)
    return runs


def shoot(runs: dict[str, Path], out: Path) -> list[Path]:
    from PIL import Image
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    from ragen.viewer import build_site

    sites = {
        k: build_site(p, p.parent / f"{k}-site", on_skip=print).parent for k, p in runs.items()
    }
    import os
    import shutil

    options = webdriver.ChromeOptions()
    options.binary_location = os.environ.get("RAGEN_CHROMIUM") or shutil.which("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.add_argument("--window-size=1280,900")
    driver = os.environ.get("RAGEN_CHROMEDRIVER") or shutil.which("chromedriver")
    d = webdriver.Chrome(options=options, service=Service(driver))
    written = []

    def grab(name: str, site: str, page: str, css: str = "main", height: int = 900, width=1280):
        d.set_window_size(width, height)
        d.get("about:blank")
        file, _, fragment = page.partition("#")
        d.get((sites[site] / file).as_uri() + (f"#{fragment}" if fragment else ""))
        time.sleep(1.5)  # the page's script loads and draws its data
        d.find_element(By.CSS_SELECTOR, css).screenshot(str(out / name))
        img = Image.open(out / name).convert("RGB")
        img.crop((0, 0, img.width, min(img.height, height))).quantize(64).save(
            out / name, optimize=True
        )
        written.append(out / name)

    out.mkdir(parents=True, exist_ok=True)
    grab("viewer_overview.png", "rollback", "index.html", "main", 1100)
    grab("viewer_collapse.png", "rollback", "index.html", "#collapse", 1400)
    grab("viewer_step.png", "synthetic", "step_000012.html#q=careful&outcome=failure", "main", 760)
    grab("viewer_trajectory.png", "oracle", "eval.html#ep=0", "main", 780)
    turn = "section.turn:has(table.pred-vs-actual.mismatch)"  # the lake slipped
    grab("viewer_prediction.png", "oracle", "eval.html#ep=0", turn, 700)
    grab("viewer_search.png", "synthetic", "search.html#q=blocked%20wall", "main", 560)
    grab("viewer_states.png", "synthetic", "states.html", "main", 700)
    grab("viewer_state.png", "synthetic", "states.html#seed=10003&a=10&b=40", "main", 760)
    page = "states.html#seed=10003&a=10&b=40"
    grab("viewer_state_diff.png", "synthetic", page, "#diff-section", 700)
    grab("viewer_thoughts.png", "synthetic", "index.html#th=1,20,40&n=4", "#thoughts-app", 700)
    grab("viewer_visual.png", "visual", "eval.html#ep=0", "main", 900)
    d.quit()
    return written


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="docs/images")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        for path in shoot(make_runs(Path(tmp)), Path(args.out)):
            print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB)")


if __name__ == "__main__":
    main()

"""Time ``ragen view`` on a synthetic training run: STEPS steps x EPISODES trajectories.

    .venv/bin/python -m bench.bench_viewer                 # 200 steps x 512 episodes
    .venv/bin/python -m bench.bench_viewer --steps 20 --episodes 64

Writes a Sokoban-shaped run (5-turn episodes of free_think replies, groups of 16, the
StarPO-S verdict and advantages as the trainer logs them, a validation file every 10
steps and two collapse events) under a temporary folder, builds the site and prints the
build time and the largest page (target: under 30 s, no page over a few MB).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--episodes", type=int, default=512)
    args = p.parse_args(argv)
    from ragen.viewer import build_site
    from ragen.viewer.synthetic import synthesize

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        tic = time.perf_counter()
        synthesize(run, args.steps, args.episodes)
        size = sum(f.stat().st_size for f in (run / "trajectories").iterdir())
        print(
            f"synthesized {args.steps} x {args.episodes} in {time.perf_counter() - tic:.1f}s "
            f"({size / 1e6:.0f} MB of trajectories)"
        )
        tic = time.perf_counter()
        index = build_site(run, Path(tmp) / "site")
        seconds = time.perf_counter() - tic
        files = [f for f in index.parent.rglob("*") if f.is_file()]
        biggest = max(files, key=lambda f: f.stat().st_size)
        total = sum(f.stat().st_size for f in files)
        print(
            f"built the site in {seconds:.1f}s: {len(files)} files, {total / 1e6:.0f} MB, "
            f"largest {biggest.relative_to(index.parent)} {biggest.stat().st_size / 1e6:.2f} MB"
        )


if __name__ == "__main__":
    main()

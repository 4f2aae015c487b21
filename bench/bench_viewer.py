"""Time ``ragen view`` on a synthetic training run: STEPS steps x EPISODES trajectories.

    .venv/bin/python -m bench.bench_viewer                 # 100 steps x 512 episodes
    .venv/bin/python -m bench.bench_viewer --steps 20 --episodes 64

Writes a Sokoban-shaped run (``ragen.viewer.synthetic``: 1-5-turn episodes of
free_think replies, groups of 16, the StarPO-S verdict and advantages as the trainer
logs them, a validation file every 10 steps, a rollback with its abandoned branch and a
later warning) under a temporary folder, builds the site and prints the build's wall
time and CPU time (this process and its workers: what a shared machine does not
change), the site's size and its largest file.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100)
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
        tic, cpu = time.perf_counter(), _cpu()
        index = build_site(run, Path(tmp) / "site")
        seconds, cpu = time.perf_counter() - tic, _cpu() - cpu
        files = [f for f in index.parent.rglob("*") if f.is_file()]
        biggest = max(files, key=lambda f: f.stat().st_size)
        total = sum(f.stat().st_size for f in files)
        print(
            f"built the site in {seconds:.1f}s ({cpu:.1f}s CPU): {len(files)} files, "
            f"{total / 1e6:.1f} MB, "
            f"largest {biggest.relative_to(index.parent)} {biggest.stat().st_size / 1e6:.2f} MB"
        )


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the build's workers)."""
    import os

    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


if __name__ == "__main__":
    main()

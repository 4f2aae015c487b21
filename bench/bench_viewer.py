"""Time ``ragen view`` on a synthetic training run: STEPS steps x EPISODES trajectories.

    .venv/bin/python -m bench.bench_viewer                 # 100 steps x 512 episodes
    .venv/bin/python -m bench.bench_viewer --steps 20 --episodes 64
    .venv/bin/python -m bench.bench_viewer --browser      # also time pages in Chromium

Writes a Sokoban-shaped run (``ragen.viewer.synthetic``: 1-5-turn episodes of
free_think replies, groups of 16, the StarPO-S verdict and advantages as the trainer
logs them, a validation file every 10 steps, a rollback with its abandoned branch and a
later warning) under a temporary folder, builds the site and prints the build's wall
time and CPU time (this process and its workers: what a shared machine does not
change), the site's size and its largest file. ``--browser`` then opens the site in
headless Chromium (selenium + chromedriver) and times the overview, a step page, an
episode, a search of one step and a run-wide search that matches nothing (so it reads
every file).
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
    p.add_argument("--browser", action="store_true", help="time pages in headless Chromium")
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
        if args.browser:
            time_pages(index.parent, args.steps // 2)


def time_pages(site: Path, step: int) -> None:
    """Seconds until each page has drawn its data, in headless Chromium."""
    import os
    import shutil

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = os.environ.get("RAGEN_CHROMIUM") or shutil.which("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    driver = os.environ.get("RAGEN_CHROMEDRIVER") or shutil.which("chromedriver")
    d = webdriver.Chrome(options=options, service=Service(driver))
    page = f"step_{step:06d}.html"
    for name, url, ready in [
        ("overview", "index.html", "#curves"),
        ("step page", page, "a.card"),
        ("an episode", f"{page}#ep=300", "#traj-title"),
        ("search one step", f"{page}#q=careful%20row%20then", "#count"),
        ("search the run (no hit: reads every file)", "search.html#q=zzzz", "[data-done='1']"),
    ]:
        file, _, fragment = url.partition("#")
        tic = time.perf_counter()
        d.get((site / file).as_uri() + (f"#{fragment}" if fragment else ""))

        def drawn(d, css=ready):  # in the page: its elements are redrawn meanwhile
            script = "const e = document.querySelector(arguments[0]);"
            script += "return !!e && !e.textContent.includes('searching');"
            return d.execute_script(script, css)

        WebDriverWait(d, 600).until(drawn)
        print(f"{name}: {time.perf_counter() - tic:.2f}s")
    heap = d.execute_script("return performance.memory.usedJSHeapSize / 1e6")
    print(f"JS heap after the run-wide search: {heap:.0f} MB")
    d.quit()


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the build's workers)."""
    import os

    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


if __name__ == "__main__":
    main()

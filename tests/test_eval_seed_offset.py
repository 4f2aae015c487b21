"""``ragen eval --seed-offset 99996`` (the largest offset the error
message suggests for 4 groups) was silent for 90 s on Sokoban while it searched 100,000
validation states. Now the search reports its progress, runs once per eval (not once per
batch), and the bound says what it costs."""

import io
import subprocess
import sys
import time
from pathlib import Path

from fakes import child_env

from ragen.agent.env_manager import SCAN_REPORT_EVERY, EnvStateManager
from ragen.agent.evaluate import MAX_VALIDATION_SEEDS, Progress, check_seed_offset, run_evaluation

REPO = Path(__file__).resolve().parents[1]


def test_the_seed_search_reports_progress_and_finds_the_same_seeds():
    calls = []
    manager = EnvStateManager("sokoban", env_groups=1, group_size=1)
    seeds = manager.validation_seeds(4, offset=600, progress=lambda f, w: calls.append((f, w)))
    assert seeds == EnvStateManager("sokoban", env_groups=1, group_size=1).validation_seeds(
        4, offset=600
    )
    assert len(calls) >= 2 and all(wanted == 604 for _, wanted in calls)
    found = [f for f, _ in calls]
    assert found == sorted(found) and found[0] == 0 and found[-1] < 604
    # one call per SCAN_REPORT_EVERY candidate seeds
    scanned = manager._next_val_candidate - 10**9
    assert len(calls) == -(-scanned // SCAN_REPORT_EVERY)


def test_seed_search_lines_start_after_min_seconds_and_are_spaced():
    now = [0.0]
    out = io.StringIO()
    progress = Progress(min_seconds=5.0, every_seconds=10.0, stream=out, clock=lambda: now[0])
    for t, found in [(1, 500), (6, 10_000), (9, 15_000), (17, 30_000), (30, 100_000)]:
        now[0] = t
        progress.seeds(found, 100_000)
    assert out.getvalue().splitlines() == [
        "eval: finding validation states (--seed-offset + groups): 10,000/100,000  "
        "elapsed 0:06  eta 0:54",
        "eval: finding validation states (--seed-offset + groups): 30,000/100,000  "
        "elapsed 0:17  eta 0:40",
    ]


def test_batches_play_the_seeds_one_search_found(monkeypatch):
    searches = []
    real = EnvStateManager.validation_seeds

    def counted(self, n_groups=None, offset=0, progress=None):
        searches.append((n_groups, offset))
        return real(self, n_groups, offset, progress)

    monkeypatch.setattr(EnvStateManager, "validation_seeds", counted)
    result = run_evaluation("oracle", "sokoban", n=6, batch_groups=2, seed_offset=50)
    assert searches == [(6, 50)]  # not once per batch of 2 groups
    expected = real(EnvStateManager("sokoban", env_groups=1, group_size=1), 6, offset=50)
    assert [t.seed for t in result.trajectories] == expected


def test_the_bound_says_what_the_largest_offset_costs():
    try:
        check_seed_offset(MAX_VALIDATION_SEEDS, 4)
    except Exception as err:  # noqa: BLE001 - the message is the point
        message = str(err)
    assert f"--seed-offset at most {MAX_VALIDATION_SEEDS - 4}" in message
    assert "1-2 minutes on Sokoban, with progress lines" in message


def test_the_issues_command_prints_progress_within_seconds():
    """The issue's exact command, in a real process: the first progress line must come
    within seconds (it printed nothing for 90 s); then the process is stopped."""
    command = [sys.executable, "-m", "ragen.cli", "eval", "--model", "oracle"]
    command += ["--env", "sokoban", "--n", "4", "--seed-offset", "99996"]
    proc = subprocess.Popen(
        command,
        cwd=REPO,
        env=child_env(REPO, OMP_NUM_THREADS="1"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    started = time.monotonic()
    try:
        line = proc.stderr.readline()
        waited = time.monotonic() - started
    finally:
        proc.kill()
        proc.communicate()
    assert line.startswith("eval: finding validation states (--seed-offset + groups): ")
    assert "/100,000  elapsed 0:0" in line and "eta" in line
    assert waited < 30  # 5 s after start on an idle machine; slack for a loaded one

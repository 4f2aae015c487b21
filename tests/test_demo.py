"""The whole demo pipeline at a toy budget: every stage runs and leaves its artifacts."""

import json
import shutil

import pytest

from ragen.demo import main


def test_demo_toy_budget_end_to_end(tmp_path, capfd):
    out = tmp_path / "demo"
    # two env pipelines side by side in worker processes (the default on a multi-core box)
    argv = ["--budget", "toy", "--out", str(out), "--env", "bandit", "--env", "sokoban"]
    assert main([*argv, "--jobs", "2"]) == 0
    assert (out / "tiny" / "config.json").exists()
    for env in ("bandit", "sokoban"):
        assert (out / env / "sft" / "model.safetensors").exists()
        assert (out / env / "sft" / "sft_metrics.jsonl").exists()
        rl = out / env / "rl"
        assert (rl / "metrics.jsonl").exists() and (rl / "config.yaml").exists()
        assert list((rl / "checkpoints").glob("step_*/actor/model.safetensors"))
    # the toy Sokoban warm start ends below its fit floor: its extra epochs ran
    first = json.loads((out / "sokoban" / "sft" / "sft_metrics.jsonl").read_text().splitlines()[0])
    assert first["extra_epochs"]["epochs"] == 2
    results = json.loads((out / "results.json").read_text())
    policies = {"random", "oracle", "warm start (SFT)", "after RL"}
    for env in ("bandit", "sokoban"):
        assert set(results[env]) == policies | {"states", "rl_gain"}
        assert results[env]["oracle"]["success_rate"] > 0
        # every policy played the same held-out states, its outcome kept per state, and
        # the gain is their paired difference with an interval around it
        states = results[env]["states"]
        assert len(states) == len(set(states)) == 4
        for policy in policies:
            outcomes = results[env][policy]["per_state"]
            assert len(outcomes) == 4 and set(outcomes) <= {0.0, 1.0}
            assert sum(outcomes) / 4 == pytest.approx(results[env][policy]["success_rate"])
        gain = results[env]["rl_gain"]
        diff = [
            a - b
            for a, b in zip(
                results[env]["after RL"]["per_state"], results[env]["warm start (SFT)"]["per_state"]
            )
        ]
        assert gain["mean"] == pytest.approx(sum(diff) / 4)
        assert gain["low"] <= gain["mean"] <= gain["high"] and gain["n"] == 4
    assert (out / "curves.png").stat().st_size > 1000
    table = (out / "results.md").read_text()
    assert "| sokoban |" in table and "after RL" in table
    assert "RL gain (points, 95% interval)" in table
    printed = capfd.readouterr().out  # the workers' lines too (their own processes)
    assert "| bandit |" in printed
    # the longest pipeline's SFT ran first, alone, before the envs went side by side
    head = printed.index("[sokoban] SFT first, on every thread")
    assert head < printed.index("running 2 envs, 2 at a time")
    assert "[sokoban] RL gain " in printed and "paired over 4 held-out states" in printed
    # the demo ends with the viewer's site of its runs, and says where it is
    assert (out / "site" / "sokoban" / "rl" / "index.html").exists()
    assert f"viewer: file://{(out / 'site' / 'index.html').resolve()}" in printed
    # a single stage re-runs alone
    assert main(["--budget", "toy", "--out", str(out), "--env", "bandit", "--stage", "report"]) == 0
    # one env failing in its worker loses neither the other env's work nor earlier results
    shutil.rmtree(out / "sokoban" / "sft")
    before = results["sokoban"]
    with pytest.raises(RuntimeError, match="failed for sokoban") as err:
        main([*argv, "--stage", "rl", "--stage", "eval", "--jobs", "2"])
    assert "run the 'sft' stage first" in str(err.value.__cause__)
    after = json.loads((out / "results.json").read_text())
    assert set(after["bandit"]) == set(results["bandit"])  # bandit re-ran and was saved
    assert after["sokoban"] == before  # untouched


def test_worker_output_is_tagged_with_its_env_once_per_line():
    import io

    from ragen.demo import _EnvTaggedStream

    out = io.StringIO()
    tagged = _EnvTaggedStream(out, "[sokoban] ")
    print("sft step 1/10", file=tagged)
    tagged.write("partial ")
    tagged.write("line\n[demo 00:00:00] [sokoban] already tagged\n")
    assert out.getvalue().splitlines() == [
        "[sokoban] sft step 1/10",
        "[sokoban] partial line",
        "[demo 00:00:00] [sokoban] already tagged",
    ]
    assert not tagged.isatty()  # so the trainer prints plain lines, no live display


_ORPHAN_SCRIPT = """
import multiprocessing, os, sys, time
from ragen.parent_watch import exit_with_parent

def child(parent):
    exit_with_parent(parent, every_s=0.05)
    time.sleep(60)

if __name__ == "__main__":
    p = multiprocessing.get_context("spawn").Process(target=child, args=(os.getpid(),))
    p.start()
    print(p.pid, flush=True)
    time.sleep(60)
"""


def test_workers_exit_when_the_demo_is_killed(tmp_path):
    # SIGKILL gives the parent no chance to shut its pool down: the workers must notice
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "parent.py"
    script.write_text(_ORPHAN_SCRIPT)
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()

    def alive(pid: int) -> bool:
        try:
            status = open(f"/proc/{pid}/status").read()
        except FileNotFoundError:
            return False
        return "State:\tZ" not in status  # a zombie has already exited

    deadline = time.monotonic() + 20
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    still_alive = alive(child)
    if still_alive:
        os.kill(child, signal.SIGKILL)
    assert not still_alive, "the worker outlived its killed parent"

"""The README's quick tour and docs/ENVIRONMENTS.md's own-env recipe, RUN as written.

Every command of the tour runs in order, as a user runs it (the console script, a fresh
folder), each reading what the previous one wrote; a failing command fails the test.
The interactive ones are driven: ``ragen play`` reads ``q`` from stdin, and the servers
(``ragen view --serve``, ``ragen serve-env``) are started, asked for a page, and stopped.
Each command's time in the README is a soft ceiling: a command past it is reported,
and one past three times it (plus 20 s for a loaded machine) fails.

To keep the suite short, the budgets of the slow steps are shrunk here with their flags
kept (:data:`SHRUNK`: the stated value -> the value run). ``RAGEN_TOUR_FULL=1`` runs the
stated budgets instead: that is how the README's times are measured
(``RAGEN_TOUR_FULL=1 .venv/bin/python -m pytest tests/test_readme_tour.py -s -k runs``
prints each command's time).

The recipe of docs/ENVIRONMENTS.md ("Your environment in 15 minutes") is run the same
way: its ``parity_env.py`` written to a folder, then its commands (``ragen play FILE:Class``,
``ragen eval --env module:Class``, ``ragen train env=module:Class``), then the same class
installed as a ``ragen.envs`` entry point.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from ragen.agent.evaluate import preset_settings
from ragen.agent.rollout_flags import rollout_from_args
from ragen.cli import build_parser, main
from ragen.sft.cli import _SFT_ROLLOUT_FLAGS
from ragen.sft.config import SFTConfig
from ragen.trainer.config import load_config

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
ENVIRONMENTS = ROOT / "docs" / "ENVIRONMENTS.md"

#: (option, value stated in the README) -> the smaller value the test runs; flags stay
SHRUNK = {
    ("--episodes", "128"): "16",  # ragen sft: expert episodes
    ("rollout.env_groups", "4"): "2",  # ragen train: 2 x 2 episodes a step, not 4 x 4
    ("rollout.group_size", "4"): "2",
    ("trainer.total_steps", "3"): "1",  # one step, validated and saved
    ("trainer.val_every", "3"): "1",
    ("trainer.save_every", "3"): "1",
    ("trainer.val_groups", "8"): "2",
    ("--n", "16"): "4",  # ragen eval of the run's checkpoint (not the oracle's 128 states)
}
#: the same for docs/ENVIRONMENTS.md's recipe
RECIPE_SHRUNK = {
    ("trainer.total_steps", "2"): "1",
    ("rollout.group_size", "4"): "2",  # 2 x 2 episodes, one minibatch of 4
    ("algo.ppo_mini_batch_size", "8"): "4",
}
#: servers listen on a free port, not on 8000 / 8765 (always, also with RAGEN_TOUR_FULL)
PORTS = {("--serve", ""): "0", ("--port", "8765"): "0"}
FULL = os.environ.get("RAGEN_TOUR_FULL", "").strip() not in ("", "0")


@dataclass
class Step:
    argv: list[str]  # after `ragen`
    seconds: float | None  # the time the docs state, if any
    line: str


def _block(text: str, heading: str, start: str = "```bash\n") -> str:
    section = text.split(heading, 1)[1]
    return section.split(start, 1)[1].split("```", 1)[0]


def _steps(block: str) -> list[Step]:
    """The commands of a ``bash`` block: argv after ``ragen``, and the stated time of
    ``(6 s)``, ``(<1 s)``, ``(8-24 s)`` (the slower one counts) or ``(2 min)`` in its
    comment."""
    steps = []
    for line in block.splitlines():
        argv = shlex.split(line, comments=True)
        assert argv[0].endswith("ragen"), line
        comment = line.partition("#")[2]
        found = re.search(r"\(<?(?:\d+(?:\.\d+)?-)?(\d+(?:\.\d+)?) (s|min)\)", comment)
        seconds = None
        if found:
            seconds = float(found.group(1)) * (60 if found.group(2) == "min" else 1)
        steps.append(Step(argv[1:], seconds, line))
    return steps


def _tour() -> list[list[str]]:
    """The quick tour's commands as argv lists (``ragen`` dropped, comments cut)."""
    return [s.argv for s in _steps(_block(README.read_text(encoding="utf-8"), "## Quick tour"))]


def _parsed(name: str):
    """(args, namespace) of each tour command whose subcommand is ``name``."""
    parser = build_parser()
    return [(argv, parser.parse_args(argv)) for argv in _tour() if argv[0] == name]


def _train_argv() -> list[str]:
    ((argv, _),) = [(a, ns) for a, ns in _parsed("train") if not ns.list_presets]
    return argv


# ------------------------------------------------------------------ what the tour says
def test_every_tour_command_parses():
    parser = build_parser()
    for argv in _tour():
        parser.parse_args(argv)


def test_each_step_reads_the_previous_steps_output():
    ((_, tiny),) = _parsed("models")
    ((_, sft),) = _parsed("sft")
    train_argv = _train_argv()
    evals = [ns for _, ns in _parsed("eval")]
    overrides = dict(arg.split("=", 1) for arg in train_argv[1:])
    assert sft.model == tiny.out  # the tiny model is the SFT base
    assert overrides["model.path"] == sft.out  # train starts from the SFT model
    run_dir = overrides["trainer.run_dir"]
    assert int(overrides["trainer.save_every"]) <= int(overrides["trainer.total_steps"])
    assert evals[-1].model == run_dir  # eval reads the run's newest checkpoint
    assert evals[-1].env == sft.env == overrides["env"]


def test_sft_prompts_exactly_as_the_rl_run_rolls_out():
    """Every knob that shapes a prompt or a turn is the same in the tour's SFT data and
    its RL rollouts (the issue: SFT refused --epsilon with full-history prompts, and with
    --context-window 0 alone its prompts differed from the train step's)."""
    ((_, sft),) = _parsed("sft")
    preset, _, _ = preset_settings("env", sft.env)
    rollout = rollout_from_args(sft, inherited=preset)
    train = load_config(_train_argv()[1:])
    for key in _SFT_ROLLOUT_FLAGS:
        assert getattr(rollout, key) == getattr(train.rollout, key), key
    SFTConfig(env=sft.env, rollout=rollout, epsilon=sft.epsilon, labels=sft.labels).validate()


def test_tour_train_config_is_valid():
    config = load_config(_train_argv()[1:])
    assert config.trainer.total_steps <= 5  # minutes, not hours, on a CPU


def test_sft_names_the_fix_when_prompts_cannot_agree(tmp_path, capsys):
    """With full-history prompts, noisy expert data cannot be labelled: the one-line
    error says which flags fix it, here and in the RL run."""
    argv = ["sft", "--env", "sokoban", "--out", str(tmp_path / "sft"), "--epsilon", "0.25"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "--context-window 0" in err and "rollout.context_window=0" in err
    assert "--labels played" in err


# ----------------------------------------------------------------------- running it
def _ragen() -> list[str]:
    script = Path(sys.executable).with_name("ragen")
    return [str(script)] if script.exists() else [sys.executable, "-m", "ragen.cli"]


def _shrink(argv: list[str], shrunk: dict) -> tuple[list[str], list[str]]:
    """``argv`` with the budgets of ``shrunk`` (none when ``RAGEN_TOUR_FULL=1``) and the
    servers on free ports; and what was changed."""
    table = {**({} if FULL else shrunk), **PORTS}
    out, changed = [], []
    for i, arg in enumerate(argv):
        key, eq, value = arg.partition("=")
        flag = argv[i - 1] if i else ""
        if eq and (key, value) in table:
            out.append(f"{key}={table[key, value]}")
            changed.append(f"{arg} -> {out[-1]}")
        elif flag.startswith("--") and (flag, arg) in table:
            out.append(table[flag, arg])
            changed.append(f"{flag} {arg} -> {out[-1]}")
        else:
            out.append(arg)
        if arg == "--serve" and (i + 1 == len(argv) or argv[i + 1].startswith("-")):
            out.append(table["--serve", ""])  # --serve alone takes port 8000
            changed.append("--serve -> --serve 0")
    return out, changed


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", **extra}
    env.pop("RAGEN_DEBUG", None)
    return env


def _run(argv: list[str], cwd: Path, stdin: str = "", env: dict | None = None, timeout=600):
    tic = time.perf_counter()
    done = subprocess.run(
        [*_ragen(), *argv],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or _env(),
    )
    seconds = time.perf_counter() - tic
    assert done.returncode == 0, (
        f"`ragen {shlex.join(argv)}` failed ({done.returncode}):\n{done.stdout[-3000:]}\n"
        f"{done.stderr[-3000:]}"
    )
    return done, seconds


def _serve(argv: list[str], cwd: Path, path: str) -> tuple[str, float]:
    """Start a server command, GET ``path`` from the URL it prints, stop it (SIGINT, as
    Ctrl-C); returns the body and the seconds until it answered."""
    tic = time.perf_counter()
    process = subprocess.Popen(
        [*_ragen(), *argv],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_env(),
    )
    try:
        url = None
        seen = []
        while url is None:
            line = process.stdout.readline()
            assert line, f"`ragen {shlex.join(argv)}` ended before serving:\n{''.join(seen)}"
            seen.append(line)
            found = re.search(r"(http://127\.0\.0\.1:\d+)", line)
            url = found.group(1) if found else None
        with urllib.request.urlopen(url + path, timeout=30) as response:
            assert response.status == 200
            body = response.read().decode("utf-8")
        seconds = time.perf_counter() - tic
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return body, seconds


def _check_time(step: Step, seconds: float, report: list[str], changed: list[str]) -> None:
    shown = f"{seconds:6.1f}s  ragen {shlex.join(step.argv)[:90]}"
    budgets = [c for c in changed if "--serve" not in c and "--port" not in c]
    if budgets:
        shown += f"   [shrunk: {', '.join(budgets)}]"
    if step.seconds is not None:
        shown += f"   (stated {step.seconds:g} s)"
    report.append(shown)
    ceiling = 60.0 if step.seconds is None else max(3 * step.seconds, step.seconds + 20)
    assert seconds <= ceiling, f"{shown}: past the ceiling of {ceiling:g} s"
    if step.seconds is not None and seconds > step.seconds and not budgets:
        report[-1] += "   <- slower than stated"


def _readme_oracle_row() -> str:
    """The Sokoban oracle cell of the README's results table (e.g. ``97.7%``)."""
    text = README.read_text(encoding="utf-8")
    header = next(line for line in text.splitlines() if line.startswith("| env |"))
    column = [c.strip() for c in header.strip("|").split("|")].index("oracle")
    row = next(line for line in text.splitlines() if line.startswith("| Sokoban |"))
    return [c.strip() for c in row.strip("|").split("|")][column]


def test_the_tour_runs_as_written(tmp_path):
    readme = README.read_text(encoding="utf-8")
    report: list[str] = []
    for step in _steps(_block(readme, "## Quick tour")):
        argv, changed = _shrink(step.argv, SHRUNK)
        command = argv[0]
        if command == "view":
            body, seconds = _serve(argv, tmp_path, "/index.html")
            assert "<html" in body.lower() and "sokoban" in body
        elif command == "serve-env":
            body, seconds = _serve(argv, tmp_path, "/info")
            assert "push every box" in json.loads(body)["instructions"].lower()
        else:
            interactive = command == "play" and "--solver" not in argv
            done, seconds = _run(argv, tmp_path, stdin="q\n" if interactive else "")
            out = done.stdout
            if command == "envs":
                assert "sokoban" in out and "Your own env" in out
            elif command == "play":
                assert "episode over" in out
            elif command == "models":
                assert (tmp_path / "runs" / "tiny" / "config.json").is_file()
            elif command == "eval" and "oracle" in argv:
                # the README table's oracle row, reproduced by the default command
                success = re.search(r"success rate\s+(\S+)", out).group(1)
                assert success == _readme_oracle_row(), out
                assert "budget: 5 turns x up to 5 actions" in out
            elif command == "eval":
                assert "using the run's rollout settings" in done.stderr
                assert "context_window=0" in done.stderr
            elif command == "sft":
                assert (tmp_path / "runs" / "sft-sokoban" / "config.json").is_file()
            elif command == "train" and "--list-presets" in argv:
                listed = step.line.partition("#")[2].split(":", 1)[1].split()
                assert all(name in out for name in listed)
            elif command == "train":
                run = tmp_path / "runs" / "sokoban-starpo-s"
                assert list((run / "checkpoints").glob("step_*"))
        _check_time(step, seconds, report, changed)
    print("\nthe README's quick tour:\n" + "\n".join(report))


# ------------------------------------------------------------- your own env, docs recipe
def _recipe() -> tuple[str, list[Step]]:
    text = ENVIRONMENTS.read_text(encoding="utf-8")
    heading = "### 1. Your own class, from the command line"
    code = _block(text, heading, "```python\n")
    assert code.startswith("# parity_env.py")
    return code, _steps(_block(text, heading))


def test_the_example_env_is_about_twenty_lines():
    code, _ = _recipe()
    lines = [ln for ln in code.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    assert len(lines) <= 30


def test_your_own_env_trains_from_the_command_line(tmp_path):
    code, steps = _recipe()
    (tmp_path / "parity_env.py").write_text(code)
    report: list[str] = []
    for step in steps:
        argv, changed = _shrink(step.argv, RECIPE_SHRUNK)
        done, seconds = _run(argv, tmp_path)
        # every command checks the user's env against the contract before using it
        assert "passed ragen.envs.checker.check_env" in done.stderr
        if argv[0] == "play":
            assert "success=True" in done.stdout
        elif argv[0] == "eval":
            assert re.search(r"success rate\s+100\.0%", done.stdout)
        elif argv[0] == "train":
            run = tmp_path / "runs" / "ParityEnv-grpo"  # named after the class
            rows = (run / "metrics.jsonl").read_text().splitlines()
            assert len(rows) == int(dict(a.split("=", 1) for a in argv[1:])["trainer.total_steps"])
            # trainer.console=false: one line saying where the config is, not the config
            assert done.stdout.splitlines() == [
                "run folder: runs/ParityEnv-grpo (config: runs/ParityEnv-grpo/config.yaml)"
            ], done.stdout
        _check_time(step, seconds, report, changed)
    print("\nyour own env (docs/ENVIRONMENTS.md):\n" + "\n".join(report))


def test_an_installed_entry_point_is_an_env_name(tmp_path):
    """What ``pip install`` of a package declaring ``[project.entry-points."ragen.envs"]``
    leaves on the path (its module and a ``dist-info`` folder with ``entry_points.txt``)
    makes its name usable like a built-in one, from any folder."""
    code, _ = _recipe()
    site = tmp_path / "site-packages"
    dist = site / "parity_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (site / "parity_env.py").write_text(code)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: parity-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[ragen.envs]\nparity = parity_env:ParityEnv\n")
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    env = _env(PYTHONPATH=path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done, _ = _run(["envs"], elsewhere, env=env)
    (line,) = [ln for ln in done.stdout.splitlines() if ln.startswith("parity ")]
    assert "entry point of parity-plugin" in line and "even or odd" in line.lower()
    done, _ = _run(["play", "parity", "--solver", "--seed", "4"], elsewhere, env=env)
    assert "passed ragen.envs.checker.check_env" in done.stderr
    assert "success=True" in done.stdout


@pytest.fixture(autouse=True)
def _no_stray_runs_folder():
    """The tour writes into its own folder, never into the repository."""
    before = (ROOT / "runs").exists()
    yield
    if not before and (ROOT / "runs").exists():
        shutil.rmtree(ROOT / "runs")
        pytest.fail("the tour wrote runs/ into the repository")

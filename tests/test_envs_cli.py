"""``ragen envs`` and ``ragen play`` driven through the real CLI entry point."""

from __future__ import annotations

import io

import pytest

from ragen.cli import main
from ragen.envs.cli import format_solver_summary, parse_overrides, solver_summary


def run(argv, capsys, monkeypatch, stdin: str = "") -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_envs_lists_names_and_descriptions(capsys, monkeypatch):
    code, out, _ = run(["envs"], capsys, monkeypatch)
    assert code == 0
    for name in ("bandit", "sokoban_large", "frozen_lake_det", "countdown", "gym_taxi"):
        assert name in out
    assert "Sokoban 8x8, 2 boxes" in out
    code, out, _ = run(["envs", "--keys"], capsys, monkeypatch)
    assert "dim_room = (8, 8)" in out and "hole_density = 0.2" in out


def test_play_reads_actions_until_quit(capsys, monkeypatch):
    code, out, _ = run(
        ["play", "sokoban", "--seed", "2"], capsys, monkeypatch, "up\nfly\nquit\nleft\n"
    )
    assert code == 0
    assert out.count("You are solving Sokoban") == 1  # instructions shown once
    assert "reward=-0.10" in out and "valid=False" in out and "use one of: up, down" in out
    assert "episode over: success=False" in out and "steps=1" in out  # 'left' after quit unread


def test_play_ends_cleanly_on_eof_and_finished_episodes(capsys, monkeypatch):
    code, out, _ = run(["play", "frozen_lake_det", "--seed", "1"], capsys, monkeypatch, "")
    assert code == 0 and "episode over" in out
    code, out, _ = run(["play", "bandit", "--seed", "0"], capsys, monkeypatch, "dragon\nphoenix\n")
    assert code == 0 and "You pulled Dragon" in out and "terminated=True" in out


def test_play_solver_solves_and_overrides_apply(capsys, monkeypatch):
    argv = ["play", "sokoban", "--solver", "--seed", "4", "--set", "dim_room=[7, 7]"]
    code, out, _ = run(argv, capsys, monkeypatch)
    assert code == 0 and "solver> " in out and "success=True" in out
    first_room = out.split("-" * 40)[1].split("solver>")[0].strip()
    assert len(first_room.splitlines()) == 7  # a 7x7 room
    code, out, _ = run(["play", "countdown", "--solver", "--seed", "1"], capsys, monkeypatch)
    assert code == 0 and "is correct" in out


def test_play_errors_are_one_line(capsys, monkeypatch):
    code, _, err = run(["play", "sokobam"], capsys, monkeypatch)
    assert code == 2 and "Did you mean 'sokoban'" in err and "Traceback" not in err
    code, _, err = run(["play", "sokoban", "--set", "num_box=2"], capsys, monkeypatch)
    assert code == 2 and "num_box" in err
    code, _, err = run(["play", "sokoban", "--set", "oops"], capsys, monkeypatch)
    assert code == 2 and "KEY=VALUE" in err


def test_parse_overrides_types():
    assert parse_overrides(["p=1/3", "size=5", "desc=[SFF, FFG]", "symbols=letters", "x=true"]) == {
        "p": pytest.approx(1 / 3),
        "size": 5,
        "desc": ["SFF", "FFG"],
        "symbols": "letters",
        "x": True,
    }


def test_solver_summary_oracle_beats_random():
    rows = solver_summary(["sokoban", "frozen_lake_det", "bandit", "countdown"], episodes=6, seed=0)
    by_env = {r["env"]: r for r in rows}
    assert set(by_env) == {"sokoban", "frozen_lake_det", "bandit", "countdown"}
    for row in rows:
        assert row["oracle_success"] == 1.0 and row["episodes"] == 6
        assert row["oracle_reward"] >= row["random_reward"]
    table = format_solver_summary(rows)
    assert "oracle succ" in table and "100%" in table and len(table.splitlines()) == 6


@pytest.mark.parametrize("word", ["q", "Q", "quit", "exit"])
def test_play_quits_on_q_quit_exit(word, capsys, monkeypatch):
    code, out, _ = run(
        ["play", "sokoban", "--seed", "2"], capsys, monkeypatch, f"up\n{word}\nleft\n"
    )
    assert code == 0
    assert "steps=1" in out and out.count("terminated=") == 1  # nothing after the quit word

"""reasoning-gym task generators as envs: seeded questions, the generators' own verifiers,
the retry option, config pass-through, and a short training run."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import child_env, short_train_args

from ragen.envs import make
from ragen.errors import MissingDependencyError

ROOT = Path(__file__).resolve().parents[1]
PRESETS = ["reasoning_gym", "rg_arithmetic", "rg_arithmetic_retry", "rg_puzzles"]
NEEDS = "needs reasoning-gym: pip install 'ragen[reasoning-gym]' (make test has it)"


def test_missing_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # import -> ImportError
    with pytest.raises(MissingDependencyError, match=r"pip install 'ragen\[reasoning-gym\]'"):
        make("rg_arithmetic")


@pytest.mark.parametrize("name", PRESETS)
def test_check_env_and_the_generators_answer_scores_one(name):
    pytest.importorskip("reasoning_gym", reason=NEEDS)
    from ragen.envs.checker import check_env

    env = make(name)
    check_env(env, seeds=(0, 1, 2))
    for seed in range(6):
        env.reset(seed)
        _, reward, terminated, truncated, info = env.step(env.oracle_action())
        assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)


def test_random_answers_are_the_tasks_chance_level():
    pytest.importorskip("reasoning_gym", reason=NEEDS)
    env = make("rg_arithmetic")
    wins = 0
    for seed in range(30):
        env.reset(seed)
        wins += env.step(env.random_action(random.Random(seed)))[4]["success"]
    assert wins <= 3  # another question's answer rarely fits (0 of these 30)


def test_the_answer_is_scored_as_written_not_normalized():
    """word_sorting's verifier is case-sensitive: the env must not lower-case answers
    the way it matches other envs' action names."""
    pytest.importorskip("reasoning_gym", reason=NEEDS)
    env = make("reasoning_gym", task="word_sorting")
    for seed in range(20):
        env.reset(seed)
        answer = env.oracle_action()
        if answer != answer.lower():
            break
    else:
        pytest.fail("no question with capitals in 20 seeds")
    _, reward, *_ = env.step(f"  {answer} ")  # surrounding space is not part of it
    assert reward == 1.0
    env.reset(seed)
    assert env.step(answer.lower())[1] < 1.0


def test_retry_after_feedback_until_right_or_out_of_answers():
    pytest.importorskip("reasoning_gym", reason=NEEDS)
    env = make("rg_arithmetic_retry")
    assert not env.single_turn and "You have 3 answers" in env.instructions
    obs = env.reset(4)
    assert obs.endswith("Answers left: 3")
    before = env.snapshot()
    _, _, _, _, info = env.step("   ")  # an empty answer is invalid and costs nothing
    assert not info["action_is_valid"] and env.snapshot() == before
    obs, reward, terminated, _, info = env.step("-99999")
    assert (reward, terminated, info["success"]) == (0.0, False, False)
    assert "is not correct (score 0.00)" in obs and obs.endswith("Answers left: 2")
    obs, reward, terminated, _, info = env.step(env.oracle_action())
    assert (reward, terminated, info["attempts"]) == (1.0, True, 2)
    env.reset(4)
    for _ in range(3):
        _, reward, terminated, _, _ = env.step("-99999")
    assert terminated and reward == 0.0 and env.done  # the last answer ends it


def test_tasks_and_settings_pass_through_with_clear_errors():
    pytest.importorskip("reasoning_gym", reason=NEEDS)
    from ragen.errors import EnvConfigError

    env = make("reasoning_gym", task="basic_arithmetic", task_config={"max_terms": 2})
    for seed in range(5):
        question = env.reset(seed)
        assert question.count("+") + question.count("*") + question.count("/") <= 3
    mixed = make("rg_puzzles")
    assert {mixed.reset(s) and mixed.task for s in range(12)} == set(mixed.tasks)
    with pytest.raises(ValueError, match="Did you mean 'basic_arithmetic'"):
        make("reasoning_gym", task="basic_arithmetics")
    with pytest.raises(EnvConfigError, match="its settings are: min_terms, max_terms"):
        make("reasoning_gym", task_config={"max_termz": 3})
    with pytest.raises(ValueError, match="task_config maps task names"):
        make("rg_puzzles", task_config={"max_terms": 3})


def test_the_same_seed_is_the_same_question_in_another_process():
    pytest.importorskip("reasoning_gym", reason=NEEDS)
    script = (
        "import json, sys, ragen.envs as e\n"
        "env = e.make('rg_puzzles')\n"
        "print(json.dumps([env.reset(s) for s in (0, 5, 123456789)]))\n"
        "assert 'torch' not in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=child_env(ROOT, PYTHONHASHSEED="77"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    env = make("rg_puzzles")
    assert json.loads(done.stdout) == [env.reset(s) for s in (0, 5, 123456789)]


def test_train_two_steps(tiny_model_dir, tmp_path):
    pytest.importorskip("reasoning_gym", reason=NEEDS)
    from ragen.cli import main

    run = tmp_path / "run"
    args = [a for a in short_train_args(tiny_model_dir, run) if a != "env=sokoban"]
    assert main([*args, "env=rg_arithmetic_retry", "rollout.max_actions_per_turn=1"]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and "val/success_rate" in rows[-1]

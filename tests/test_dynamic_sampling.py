"""Training where the signal is: dynamic sampling (DAPO) and the difficulty curriculum."""

import json

import pytest

import ragen.envs as envs
from ragen.agent.env_manager import EnvStateManager
from ragen.agent.trajectory import Trajectory
from ragen.cli import main
from ragen.errors import ConfigError
from ragen.trainer.config import load_config
from ragen.trainer.dynamic_sampling import Curriculum, informative_groups, sample_informative
from tests.fakes import short_train_args


def _episode(group: int, member: int, success: bool, reward: float = 0.0, size: int = 2):
    return Trajectory(
        [], [], [], [], [],
        group_id=group, episode_id=group * size + member,
        success=success, episode_reward=reward,
    )  # fmt: skip


def _round(outcomes: list[list[bool]], size: int = 2) -> list[Trajectory]:
    return [
        _episode(g, m, ok, size=size)
        for g, group in enumerate(outcomes)
        for m, ok in enumerate(group)
    ]


def test_groups_that_all_agree_are_not_informative():
    batch = _round([[True, True], [False, False], [True, False]])
    assert informative_groups(batch, "success") == {2}
    by_reward = [_episode(0, 0, False, -1.0), _episode(0, 1, False, -0.5)]
    assert informative_groups(by_reward, "success") == set()
    assert informative_groups(by_reward, "reward") == {0}


def test_refills_until_the_batch_is_full_of_informative_groups():
    rounds = {
        0: _round([[True, True], [True, False], [False, False]]),  # 1 informative
        1: _round([[False, True], [False, False], [True, False]]),  # 2 informative
        2: _round([[True, False], [True, False], [True, False]]),  # never reached
    }
    asked = []

    def rollout_round(r):
        asked.append(r)
        return rounds[r]

    kept, first, m = sample_informative(rollout_round, target=3, group_size=2, max_rounds=3)
    assert asked == [0, 1]
    assert first == rounds[0]
    assert sorted({t.group_id for t in kept}) == [0, 1, 2]
    assert len({t.episode_id for t in kept}) == 6  # renumbered: unique, 2 per group
    for g in range(3):
        assert {t.success for t in kept if t.group_id == g} == {True, False}
    assert m["sampling/rounds"] == 2 and m["sampling/episodes"] == 12
    assert m["sampling/informative_frac"] == pytest.approx(3 / 6)
    assert m["sampling/filled_frac"] == 1.0 and m["sampling/fallback"] == 0.0


def test_a_partial_batch_after_the_last_refill_and_a_fallback_when_none_is_found():
    only = _round([[True, False], [True, True]])
    kept, _, m = sample_informative(
        lambda r: only if r == 0 else _round([[1, 1], [0, 0]]), 2, 2, max_rounds=1
    )
    assert len({t.group_id for t in kept}) == 1 and m["sampling/filled_frac"] == 0.5
    dull = _round([[True, True], [False, False]])
    kept, first, m = sample_informative(lambda r: dull, 2, 2, max_rounds=2)
    assert kept is first and m["sampling/fallback"] == 1.0 and m["sampling/rounds"] == 3


def test_the_curriculum_level_rises_only_after_a_window_of_success():
    c = Curriculum(start=2, step=2, stop=4, advance_at=0.6, window=2)
    assert [c.observe(s) for s in (0.9, 0.2, 0.7, 0.7)] == [False, False, False, True]
    assert c.level == 4 and c.max_difficulty == 4
    assert [c.observe(s) for s in (1.0, 1.0)] == [False, True]
    assert c.level == 6 and c.max_difficulty is None  # past stop: every state
    assert c.observe(1.0) is False
    again = Curriculum(start=2)
    again.restore(c.state())
    assert again.level == 6 and again.recent == c.recent


@pytest.mark.parametrize("env_name, level", [("sokoban", 3.0), ("frozen_lake", 0.3)])
def test_curriculum_states_are_no_harder_than_the_level(env_name, level):
    manager = EnvStateManager(env_name, env_groups=16, group_size=1, seed=0)
    probe = envs.make(env_name)
    free = manager.seeds_for_step(0)
    manager.max_difficulty = level
    seeds = manager.seeds_for_step(0)
    for seed in seeds:
        probe.reset(seed)
        assert probe.difficulty() <= level
        assert manager.held_out(seed) is False
    assert seeds == manager.seeds_for_step(0)  # still a pure function of (seed, step, level)
    assert seeds != free
    refill = manager.seeds_for_step(0, draw=1)
    assert refill != seeds and refill == manager.seeds_for_step(0, draw=1)


def test_config_rejects_a_curriculum_the_env_cannot_rank():
    with pytest.raises(ConfigError, match="env.curriculum.start"):
        load_config(["env=bandit", "env.curriculum.start=1"])
    with pytest.raises(ConfigError, match="train_states"):
        load_config(["env=sokoban", "env.curriculum.start=3", "env.train_states=8"])
    with pytest.raises(ConfigError, match="algo.dynamic_sampling.on"):
        load_config(["algo.dynamic_sampling.on=entropy"])


def test_a_run_with_dynamic_sampling_and_a_curriculum_logs_both_and_resumes_the_level(
    tiny_model_dir, tmp_path
):
    run = tmp_path / "run"
    extra = [
        "algo.dynamic_sampling.enabled=true",
        "algo.dynamic_sampling.on=reward",
        "algo.dynamic_sampling.max_rounds=1",
        "env.curriculum.start=2",
        "env.curriculum.advance_at=0.01",  # any success advances (one-step window)
        "env.curriculum.window=1",
        "rollout.max_turns=3",
    ]
    assert main(short_train_args(tiny_model_dir, run, *extra)) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").open() if "step" in line]
    rows = [r for r in rows if "event" not in r]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert 1.0 <= r["sampling/rounds"] <= 2.0
        assert 0.0 <= r["sampling/informative_frac"] <= 1.0
        assert r["curriculum/level"] >= 2.0
    state = json.loads((run / "checkpoints" / "step_000002" / "trainer_state.json").read_text())
    assert state["curriculum"]["level"] >= 2.0
    # a resumed run continues at the saved level
    more = short_train_args(
        tiny_model_dir, run, *extra, "trainer.total_steps=3", "trainer.resume=auto"
    )
    assert main(more) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").open()]
    last = [r for r in rows if r.get("step") == 3 and "event" not in r][0]
    assert last["curriculum/level"] == state["curriculum"]["level"]

"""Registry, the contract checker on every registered env, cross-process determinism."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import child_env

import ragen.envs as envs
from ragen.envs import Env, make, make_from_config, names
from ragen.envs.base import make_info
from ragen.envs.checker import EnvCheckError, check_env

ROOT = Path(__file__).resolve().parents[1]
EXPECTED = {
    "bandit",
    "bandit_test",
    "bandit_reversed",
    "sokoban",
    "sokoban_large",
    "sokoban_symbols",
    "frozen_lake",
    "frozen_lake_det",
    "countdown",
    "gym_frozen_lake",
    "gym_taxi",
}


def test_all_envs_are_registered_with_descriptions():
    assert EXPECTED <= set(names())
    for name in names():
        assert envs.spec(name).description


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_check_env_passes_for_every_registered_env(name):
    if name.startswith("gym_"):
        pytest.importorskip("gymnasium")
    env = make(name)
    assert env.name == name
    check_env(env, seeds=(0, 1, 2))


def test_registry_errors_are_helpful():
    with pytest.raises(KeyError, match="Did you mean 'sokoban'") as err:
        make("sokobam")
    assert "frozen_lake" in str(err.value)  # lists the registered names
    with pytest.raises(TypeError, match=r"unknown config key\(s\) \['dim_rooms'\]"):
        make("sokoban", dim_rooms=(6, 6))
    with pytest.raises(ValueError, match="already registered"):
        envs.register("sokoban", "ragen.envs.games.sokoban.env:SokobanEnv", "dup")
    with pytest.raises(KeyError, match="'name'"):
        make_from_config({"p": 1.0})


def test_make_from_config_and_presets(tmp_path):
    env = make_from_config({"name": "sokoban_large", "max_steps": 7})
    assert env.dim_room == (8, 8) and env.num_boxes == 2 and env.max_steps == 7
    path = tmp_path / "env.yaml"
    path.write_text("name: frozen_lake\np: 1.0\nsize: 5\n")
    lake = make_from_config(path)
    lake.reset(0)
    assert lake.p == 1.0 and lake.rows == 5
    with pytest.raises(FileNotFoundError):
        make_from_config(tmp_path / "missing.yaml")
    assert envs.config_keys("sokoban_large")["num_boxes"] == 2


def test_reset_is_identical_in_another_process_and_envs_do_not_import_torch():
    env_names = sorted(n for n in EXPECTED if not n.startswith("gym_"))
    script = (
        "import json, sys, ragen.envs as e\n"
        "seeds = (0, 1, 12345, 2**40)\n"
        "out = {n: [e.make(n).reset(s) for s in seeds] for n in sys.argv[1:]}\n"
        "assert 'torch' not in sys.modules, 'environments must not import torch'\n"
        "print(json.dumps(out))"
    )
    here = json.loads(_run(script, env_names, "0"))
    there = json.loads(_run(script, env_names, "12345"))
    assert here == there
    local = {n: [make(n).reset(s) for s in (0, 1, 12345, 2**40)] for n in env_names}
    assert local == here


def _run(script: str, args: list[str], hash_seed: str) -> str:
    env = child_env(ROOT, PYTHONHASHSEED=hash_seed)
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


class _LeakyEnv(Env):
    """Breaks the contract: an invalid action still moves the counter."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def _reset(self, seed):
        self.count = 0

    def _step(self, action):
        self.count += 1
        valid = action == "go"
        return self.render(), 0.0, False, False, make_info(valid, valid, False)

    @property
    def instructions(self):
        return "Answer with: go"

    @property
    def action_names(self):
        return ["go"]

    def render(self, mode="text"):
        return f"count={self.count}"


def test_checker_catches_a_broken_env():
    with pytest.raises(EnvCheckError, match="invalid action .* changed the state"):
        check_env(_LeakyEnv(), seeds=(0,))


class _OldContractEnv(_LeakyEnv):
    """Follows the old contract: ``_step`` returns ``(obs, reward, done, info)``."""

    def _step(self, action):
        valid = action == "go"
        self.count += valid
        return self.render(), 0.0, self.count >= 2, make_info(valid, valid, False)


class _OverridingStepEnv(_OldContractEnv):
    """Overrides ``step`` itself with the old 4-tuple."""

    def step(self, action):
        return self._step(action)


@pytest.mark.parametrize("env_type", [_OldContractEnv, _OverridingStepEnv])
def test_checker_rejects_the_old_four_tuple_naming_the_fix(env_type):
    with pytest.raises(EnvCheckError, match="old 4-tuple") as err:
        check_env(env_type(), seeds=(0,))
    assert "(obs, reward, terminated, truncated, info)" in str(err.value)


class _FlagTypeEnv(_LeakyEnv):
    """Overrides ``step`` with int flags (``Env.step`` itself coerces them to bool)."""

    def step(self, action):
        return self.render(), 0.0, 0, 0, make_info(True, False, False)


def test_checker_requires_bool_flags():
    with pytest.raises(EnvCheckError, match="terminated must be a bool"):
        check_env(_FlagTypeEnv(), seeds=(0,))


def test_env_step_rejects_the_old_four_tuple_outside_the_checker():
    env = _OldContractEnv()
    env.reset(0)
    with pytest.raises(TypeError, match=r"_OldContractEnv\._step returned the old 4-tuple"):
        env.step("go")

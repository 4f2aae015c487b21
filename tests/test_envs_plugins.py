"""A user's own env from anywhere: ``package.module:Class``, ``path/to/file.py:Class`` and
the ``ragen.envs`` entry points of installed packages, checked by ``check_env`` before a
command uses them; and ``ragen envs NAME``, which shows one env in full (options,
turn budget, reasoning-gym's tasks)."""

from __future__ import annotations

import sys
import textwrap

import pytest

import ragen.envs as envs
from ragen.cli import main
from ragen.envs.adapters.reasoning_gym_env import task_names
from ragen.envs.checker import check_plugin
from ragen.errors import ConfigError, EnvContractError, MissingFileError, UnknownEnvError
from ragen.trainer.config import load_config

COIN = textwrap.dedent(
    '''
    import random

    from ragen.envs import Env, make_info


    class CoinEnv(Env):
        """Call the coin the seed shows: heads or tails."""

        single_turn = True
        instructions = "A coin shows a side. Answer heads or tails."
        action_names = ["heads", "tails"]

        def __init__(self, bias: float = 0.5):
            super().__init__()
            self.bias, self.side = bias, "heads"

        def _reset(self, seed):
            self.side = "heads" if random.Random(seed).random() < self.bias else "tails"

        def _step(self, action):
            if action not in self.action_names:
                return self.render(), 0.0, False, False, make_info(False, False, False)
            right = action == self.side
            return self.render(), float(right), True, False, make_info(True, True, right)

        def render(self, mode="text"):
            if mode != "text":
                raise ValueError(mode)
            return f"The coin shows {self.side}."

        def oracle_action(self):
            return None if self.done else self.side


    class BrokenEnv(CoinEnv):
        """Raises on an action it does not know: breaks the contract."""

        def _step(self, action):
            if action not in self.action_names:
                raise KeyError(action)
            return super()._step(action)


    NOT_AN_ENV = 3
    '''
)


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    """A folder holding ``coin_plugin.py`` (the module name unique to this test run),
    with ``sys.path`` and the registry's plug-ins restored afterwards."""
    name = f"coin_plugin_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(COIN)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(envs.registry, "_PLUGINS", {})
    monkeypatch.setattr(envs.checker, "_CHECKED", set())
    yield tmp_path, name
    sys.modules.pop(name, None)


def test_an_import_path_is_an_env_name(plugin_dir, monkeypatch):
    folder, module = plugin_dir
    monkeypatch.syspath_prepend(str(folder))
    name = f"{module}:CoinEnv"
    env = envs.make(name, bias=1.0)
    assert env.reset(0) == "The coin shows heads." and env.name == name
    assert envs.is_plugin(name) and not envs.is_plugin("sokoban")
    assert envs.config_keys(name) == {"bias": 0.5}
    assert "Call the coin" in envs.spec(name).description
    assert "import path" in envs.spec(name).description
    with pytest.raises(ConfigError, match="has no option 'bais'. Did you mean 'bias'"):
        envs.check_options(name, {"bais": 1})
    assert envs.slug(name) == "CoinEnv" and envs.slug("sokoban") == "sokoban"


def test_a_module_in_the_current_folder_is_found_there(plugin_dir, monkeypatch):
    """As ``uvicorn module:app``: the folder the command runs in counts, after every
    installed package (the console script's own folder is what Python puts first)."""
    folder, module = plugin_dir
    monkeypatch.chdir(folder)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(folder))])
    assert envs.make(f"{module}:CoinEnv").reset(3)
    assert sys.path[-1] == str(folder)


def test_a_file_is_an_env_name(plugin_dir, monkeypatch):
    folder, module = plugin_dir
    monkeypatch.chdir(folder.parent)
    name = f"{folder.name}/{module}.py:CoinEnv"
    env = envs.make(name)
    assert env.reset(0).startswith("The coin shows")
    assert envs.spec(name).plugin == "file"
    # the same file named twice is one module: its classes are the same objects
    assert envs.spec(name).load_class() is type(env)


def test_an_installed_entry_point_is_listed_and_made(plugin_dir, monkeypatch):
    folder, module = plugin_dir
    dist = folder / "coin_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: coin-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[ragen.envs]\ncoin = {module}:CoinEnv\n")
    monkeypatch.syspath_prepend(str(folder))
    assert "coin" in envs.names() and "sokoban" in envs.names()
    assert "entry point of coin-plugin" in envs.spec("coin").description
    assert envs.make("coin").reset(1).startswith("The coin shows")
    assert envs.is_plugin("coin")


@pytest.mark.parametrize(
    "name, error, message",
    [
        ("no_such_module_xyz:Env", UnknownEnvError, "no module named 'no_such_module_xyz'"),
        ("{module}:Coin", UnknownEnvError, "has no 'Coin'. Fix: one of its Env classes: "),
        ("{module}:NOT_AN_ENV", EnvContractError, "not a subclass of ragen.envs.Env"),
        ("missing/file.py:CoinEnv", MissingFileError, "file missing/file.py does not exist"),
        ("{module}:", UnknownEnvError, "names no class"),
    ],
)
def test_a_bad_plug_in_is_one_line_naming_the_fix(plugin_dir, monkeypatch, name, error, message):
    folder, module = plugin_dir
    monkeypatch.syspath_prepend(str(folder))
    with pytest.raises(error) as caught:
        envs.spec(name.format(module=module))
    text = str(caught.value)
    assert message in text and "Fix" in text and "\n" not in text


def test_a_file_that_does_not_import_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "typo.py").write_text("class Broken(:\n    pass\n")
    (tmp_path / "needs.py").write_text("import no_such_dependency_xyz\n")
    with pytest.raises(UnknownEnvError, match=r"cannot import .*SyntaxError"):
        envs.spec("typo.py:Broken")
    monkeypatch.setattr(sys, "path", [*sys.path, str(tmp_path)])
    with pytest.raises(UnknownEnvError, match=r"cannot import needs .*no_such_dependency_xyz"):
        envs.spec("needs:Broken")


def test_the_config_takes_a_plug_in_and_names_the_key(plugin_dir, monkeypatch):
    folder, module = plugin_dir
    monkeypatch.syspath_prepend(str(folder))
    cfg = load_config([f"env={module}:CoinEnv", "env.config.bias=0.9"])
    assert cfg.env.name == f"{module}:CoinEnv" and cfg.env.config == {"bias": 0.9}
    typo = r"^env\.name: unknown value 'sokobn'\. Did you mean 'sokoban'\?.*package\.module:Class"
    with pytest.raises(ConfigError, match=typo):
        load_config(["env=sokobn"])
    with pytest.raises(ConfigError, match=r"^env\.name: environment 'nope:X': no module named"):
        load_config(["env=nope:X"])
    with pytest.raises(ConfigError, match=r"env\.config\.bais: .*Did you mean 'bias'"):
        load_config([f"env={module}:CoinEnv", "env.config.bais=0.9"])


def test_a_plug_in_is_checked_once_and_a_broken_one_stops_the_command(plugin_dir, capsys):
    folder, module = plugin_dir
    good = f"{folder}/{module}.py:CoinEnv"
    assert check_plugin(good) is True and check_plugin(good) is False  # once per process
    assert "passed ragen.envs.checker.check_env" in capsys.readouterr().err
    assert check_plugin("sokoban") is False  # ragen's own envs: the suite checks them
    broken = f"{folder}/{module}.py:BrokenEnv"
    for argv in (
        ["play", broken, "--solver"],
        ["eval", "--model", "oracle", "--env", broken, "--n", "2"],
        ["serve-env", broken, "--port", "0"],
        ["sft", "--env", broken, "--out", str(folder / "sft"), "--episodes", "2"],
        ["train", f"env={broken}", "model=tiny", "trainer.total_steps=1"],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err
        assert "BrokenEnv" in err and "raised KeyError" in err and "Fix: make the env" in err


def test_envs_shows_one_env_in_full(capsys):
    assert main(["envs", "reasoning_gym"]) == 0
    out = capsys.readouterr().out
    tasks = task_names()
    assert f"{len(tasks)} reasoning-gym tasks" in out and len(tasks) > 100
    assert all(task in out for task in tasks)
    assert "task_config = None" in out and "max_attempts = 1" in out
    assert "turn budget (ragen train env=reasoning_gym" in out and "max_turns=1" in out
    assert main(["envs", "openenv", "remote"]) == 0
    out = capsys.readouterr().out
    for option in ("action_fn = None", "observation_fn = None", "url = None", "token = None"):
        assert option in out
    assert main(["envs"]) == 0
    assert "`ragen envs reasoning_gym` lists reasoning-gym's tasks" in capsys.readouterr().out
    assert main(["envs", "sokobn"]) == 2
    assert "Did you mean 'sokoban'" in capsys.readouterr().err

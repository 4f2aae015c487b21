"""Inputs that gave a traceback where one line is due, replayed (docs/RELIABILITY.md).

Each command must exit with status 2 and print exactly one ``ragen CMD: error:`` line
that names the problem and the fix; and user errors raised below the CLI (bad option
values reaching the algorithms, the engines, the tiny models) are
:class:`~ragen.errors.RagenError` subclasses, which the CLI prints that way, while
staying ``ValueError``s for ``except ValueError`` callers."""

import errno
import os
import socket
import stat

import pytest

from ragen.cli import main
from ragen.errors import ConfigError, RagenError, UsageError


def _one_line(capsys, command):
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    (line,) = [x for x in err.splitlines() if x.startswith(f"ragen {command}: error:")]
    assert "Fix:" in line or "fix" in line.lower(), line
    return line


def test_a_read_only_run_dir_is_one_line(tiny_model_dir, tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    run.mkdir()
    run.chmod(stat.S_IRUSR | stat.S_IXUSR)  # r-x: nothing can be created inside
    if os.geteuid() == 0:  # root writes anyway: make the kernel's refusal explicit
        import ragen.run_layout as run_lock

        def refuse(path, *args, **kwargs):
            raise OSError(errno.EROFS, "Read-only file system", str(path))

        monkeypatch.setattr(run_lock, "open", refuse, raising=False)
    try:
        code = main(
            ["train", "env=bandit", f"model.path={tiny_model_dir}", f"trainer.run_dir={run}"]
        )
    finally:
        run.chmod(stat.S_IRWXU)
    assert code == 2
    line = _one_line(capsys, "train")
    assert f"trainer.run_dir: cannot write to {run}" in line
    assert "choose a writable folder" in line


def test_serve_env_on_a_port_in_use_is_one_line(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve-env", "sokoban", "--port", str(port), "--quiet"]) == 2
    line = _one_line(capsys, "serve-env")
    assert f"port {port} on 127.0.0.1 is already in use" in line and "--port 0" in line


@pytest.mark.parametrize("command", ["serve-env", "play"])
def test_a_bad_env_option_value_is_one_line(command, capsys):
    assert main([command, "sokoban", "--set", "dim_room=abc"]) == 2
    line = _one_line(capsys, command)
    # the env's own check names the env, the option and the bad value, with a fix
    assert "'sokoban'" in line and "dim_room" in line and "'abc'" in line and "Fix" in line


def test_a_bad_env_option_value_in_eval_is_one_line(capsys):
    args = ["eval", "--model", "oracle", "--env", "sokoban", "--n", "2"]
    assert main([*args, "--env-config", "dim_room=abc"]) == 2
    line = _one_line(capsys, "eval")
    assert "'sokoban'" in line and "dim_room" in line and "'abc'" in line and "Fix" in line


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--epsilon", "2"], "--epsilon must be in [0, 1]"),
        (["--epsilon", "nan"], "--epsilon must be in [0, 1]"),
        (["--temperature", "nan"], "--temperature: must be a finite number, got nan"),
        (["--temperature", "inf"], "--temperature: must be a finite number, got inf"),
        (["--top-p", "nan"], "--top-p: must be a finite number, got nan"),
    ],
)
def test_eval_rejects_bad_numbers_in_one_line(flags, needle, capsys):
    args = ["eval", "--model", "oracle", "--env", "sokoban", "--n", "2", *flags]
    assert main(args) == 2
    assert needle in _one_line(capsys, "eval")


@pytest.mark.parametrize("epsilon", ["1.5", "-0.1", "nan"])
def test_sft_epsilon_outside_0_1_is_one_line(tmp_path, epsilon, capsys):
    out = tmp_path / "sft"
    assert main(["sft", "--out", str(out), "--episodes", "2", f"--epsilon={epsilon}"]) == 2
    assert "epsilon: the share of expert actions made random must be in [0, 1]" in _one_line(
        capsys, "sft"
    )
    assert not out.exists()


# ------------------------------------------------------------------------------ below the CLI
def _raises_user_error(call, cls, match):
    with pytest.raises(cls, match=match) as info:
        call()
    assert isinstance(info.value, RagenError) and isinstance(info.value, ValueError)


def test_user_caused_value_errors_are_user_errors():
    import torch

    from ragen import algo
    from ragen.agent.policies import OraclePolicy
    from ragen.agent.prompts import system_message
    from ragen.engines.base import SamplingParams
    from ragen.engines.compiled import make_hf_engine
    from ragen.engines.hf import check_sampling_params
    from ragen.models.tiny import tiny_qwen2_config

    x = torch.zeros(2, 3)
    cases = [
        (lambda: algo.kl_penalty(x, x, "k9"), ConfigError, "unknown KL kind 'k9'"),
        (
            lambda: algo.agg_loss(x, x, "token-meen"),
            ConfigError,
            "unknown loss_agg_mode 'token-meen'",
        ),
        (
            lambda: algo.filter_groups(x[0], torch.tensor([0, 1, 1]), strategy="top_q"),
            ConfigError,
            "unknown filter strategy",
        ),
        (lambda: OraclePolicy(epsilon=2.0), UsageError, r"must be in \[0, 1\], got 2.0"),
        (lambda: system_message("rules", style="tiny"), ConfigError, "unknown prompt style"),
        (
            lambda: check_sampling_params(SamplingParams(temperature=-1.0)),
            ConfigError,
            "temperature must be >= 0",
        ),
        (lambda: make_hf_engine(None, None, "turbo"), ConfigError, "unknown engine 'turbo'"),
        (
            lambda: tiny_qwen2_config("huge", None, 0),
            ConfigError,
            "unknown tiny model size 'huge'",
        ),
    ]
    for call, cls, match in cases:
        _raises_user_error(call, cls, match)


# the last ones a probe of bad files, options and folders found
@pytest.mark.parametrize(
    "text, expected",
    [
        ("model: [1, 2\n", "is not valid YAML (line 2, column 1)"),
        ("- a\n- b\n", "holds a ListConfig, not a mapping of sections"),
    ],
)
def test_a_config_file_that_is_not_a_config_is_one_line(tmp_path, capsys, text, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main(["train", f"config={path}", "--print-config"]) == 2
    assert expected in _one_line(capsys, "train")


@pytest.mark.parametrize(
    "argv, command, expected",
    [
        (
            ["play", "sokoban", "--set", "levels=/no/such/levels.txt", "--solve"],
            "play",
            "levels file '/no/such/levels.txt' not found",
        ),  # fmt: skip
        (
            ["play", "frozen_lake", "--set", "p=nan", "--solve"],
            "play",
            "p='nan' must be a probability in [0, 1]",
        ),  # fmt: skip
        (
            ["eval", "--model", "oracle", "--env", "bandit", "--n", "2", "--out", "/proc/ragen"],
            "eval",
            "--out /proc/ragen: cannot create it",
        ),  # fmt: skip
        (
            ["sft", "--env", "bandit", "--episodes", "2", "--out", "/proc/ragen"],
            "sft",
            "--out /proc/ragen: cannot create it",
        ),  # fmt: skip
    ],
)
def test_bad_files_and_folders_are_one_line(capsys, argv, command, expected):
    assert main(argv) == 2
    line = _one_line(capsys, command)
    assert expected in line, line


def test_an_output_folder_that_is_a_file_is_one_line(tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.write_text("x")
    assert main(["models", "create-tiny", "--out", str(taken)]) == 2
    assert "exists and is not a folder" in _one_line(capsys, "models")


def test_a_port_out_of_range_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["serve-env", "sokoban", "--port", "99999"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "'99999' is not a TCP port (0-65535" in err


def test_a_missing_file_is_still_a_file_not_found_error():
    from ragen.envs.games.sokoban.level_files import load_levels
    from ragen.errors import MissingFileError

    with pytest.raises(FileNotFoundError) as err:
        load_levels("/no/such/levels.txt")
    assert isinstance(err.value, MissingFileError) and isinstance(err.value, RagenError)

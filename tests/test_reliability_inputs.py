"""Issue 55's inputs outside OpenEnv, replayed (docs/RELIABILITY.md "The OpenEnv server
and client, sizes, disks and the last config keys"): numbers too big to read in a run's files, config keys that
slipped through validation (sizes past what the machine holds, container keys of the
wrong shape, a documented key nobody read), TextWorld's NaN reward, the opponent's
model folder, output folders on a full or read-only disk, and ``ragen sft``'s LoRA rank.
Each bad input must end in one line naming the problem and the fix, before any model
loads, and never exit 0."""

from __future__ import annotations

import errno
import math

import pytest

from ragen.cli import main
from ragen.errors import ConfigError
from ragen.trainer.config import load_config, validation
from ragen.trainer.metrics_logger import MetricsLogger, move_logs_after, read_metrics


# -- item 7: a number of more than 4,300 digits in metrics.jsonl ----------------------------
def test_resume_reads_a_metrics_file_with_a_4301_digit_number(tmp_path):
    """The probe: `trainer.resume=auto` crashed on such a line (Python refuses int() of
    more than 4,300 digits). What resume reads, the logger reopened at the checkpoint's
    step and the later steps moved aside, now takes it as inf."""
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(
        '{"step": 1, "rollout/reward_mean": 0.5}\n'
        '{"step": 2, "rollout/reward_mean": ' + "9" * 4301 + "}\n"
        '{"step": 3, "rollout/reward_mean": -' + "9" * 400 + "}\n"
        '{"step": 4, "rollout/reward_mean": 1.0}\n'
    )
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert rows[1]["rollout/reward_mean"] == math.inf
    assert rows[2]["rollout/reward_mean"] == -math.inf
    assert move_logs_after(tmp_path, 3, tmp_path / "aside") == ["metrics.jsonl"]
    logger = MetricsLogger(tmp_path, total_steps=4, console=False, tensorboard=False, start_step=2)
    logger.close()
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2]
    assert [r["step"] for r in read_metrics(tmp_path / "aside")] == [4]


# -- item 8: config keys that slipped through -------------------------------------------------
def _train_line(capsys, run_dir, *overrides: str) -> str:
    """``ragen train`` with ``overrides`` and a model path that does not exist: the one
    error line, which must come from the config (or the env), before any model loads."""
    code = main(["train", "model.path=/no/such/model", f"trainer.run_dir={run_dir}", *overrides])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    (line,) = err.strip().splitlines()
    assert line.startswith("ragen train: error: ") and "/no/such/model" not in line, line
    return line.removeprefix("ragen train: error: ")


@pytest.mark.parametrize(
    "overrides, words",
    [
        # container keys of the wrong shape (a TypeError traceback, or one after the model loaded)
        (
            ["model.lora.target_modules=[[]]"],
            "model.lora.target_modules: must be a list of non-empty strings",
        ),
        (["model.lora.rank=8", "model.lora.target_modules=[]"], "would train no adapter at all"),
        (["model.lora.target_modules=[q_proj,'v proj']"], "'v proj' is not a module name"),
        (
            ["trainer.rollback_change={}"],
            "trainer.rollback_change: must be a list, got the mapping {}",
        ),
        (["trainer.collapse.signals={}"], "trainer.collapse.signals: must be a list"),
        (["env.config=[]"], "env.config: must be a mapping of options"),
        # sizes past what the machine holds (ran for minutes, or a MemoryError)
        (
            ["rollout.env_groups=99999999999999999999999"],
            "rollout.env_groups: 99,999,999,999,999,999,999,999 does not fit in 64 bits",
        ),
        (
            ["rollout.env_groups=1000000000000"],
            "rollout.env_groups: rollout.env_groups=1,000,000,000,000 x rollout.group_size=16",
        ),
        (["trainer.val_groups=1000000000000"], "trainer.val_groups: "),
        (["rollout.max_model_len=1000000000000000"], "rollout.max_model_len: "),
        (["trainer.seed=-99999999999999999999999"], "trainer.seed: "),
        (["env.train_states=10000000000"], "cannot be drawn from the 1,000,000,000 training seeds"),
        (["algo.micro_token_budget=100000000000000000"], "algo.micro_token_budget: "),
        (["trainer.rollout_workers=100000000"], "processes of at least 250 MB each"),
        (["env.config.dim_room=[1000000,1000000]"], "dim_room=(1000000, 1000000) is too large"),
        (["env.config.dim_room=[30000,30000]"], "each side must be <= 100"),
        # a documented key that nothing read
        (["model.tokenizer_path=some/tokenizer"], "model.tokenizer_path: this key was removed"),
    ],
)
def test_config_keys_that_slipped_through_are_one_line_before_any_model_loads(
    overrides, words, capsys, tmp_path
):
    line = _train_line(capsys, tmp_path / "run", *overrides)
    assert words in line and "Fix:" in line, line


def test_a_removed_key_left_at_null_in_an_old_config_is_dropped(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text("model:\n  tokenizer_path: null\ntrainer:\n  total_steps: 3\n")
    cfg = load_config([f"config={old}"])
    assert cfg.trainer.total_steps == 3 and not hasattr(cfg.model, "tokenizer_path")


def test_sizes_are_bounded_by_the_machines_memory():
    """The bound is the machine's: the same config fits a big machine, not a small one."""
    cfg = load_config(
        ["rollout.env_groups=64", "rollout.group_size=16", "rollout.max_model_len=32768"]
    )
    need = (64 * 16 + 32) * (validation.EPISODE_FLOOR_BYTES + 8 * 32768)
    validation._check_sizes(cfg, memory=need)  # just fits
    with pytest.raises(ConfigError, match="rollout.max_model_len: .* more than this machine's"):
        validation._check_sizes(cfg, memory=need - 1)


# -- item 10: the opponent's model as docs/ENVIRONMENTS.md says -----------------------------
def test_the_opponent_model_may_be_a_run_a_checkpoint_or_a_model_folder(tiny_model_dir, tmp_path):
    """The probe: `opponent_model` took only `step_N/actor`; a run folder or a checkpoint
    folder, which docs/ENVIRONMENTS.md names, failed to load."""
    import shutil

    from ragen.agent.opponent import ModelOpponent, model_folder

    run = tmp_path / "run"
    for step in ("step_000001", "step_000002"):
        checkpoint = run / "checkpoints" / step
        shutil.copytree(tiny_model_dir, checkpoint / "actor")
        (checkpoint / "train_config.json").write_text("{}")
    newest = str(run / "checkpoints" / "step_000002" / "actor")
    assert model_folder(str(run)) == newest  # a run: its newest checkpoint
    assert model_folder(str(run / "checkpoints" / "step_000002")) == newest
    assert model_folder(newest) == newest
    assert model_folder(tiny_model_dir) == tiny_model_dir  # any model folder, as it is
    for given in (run, run / "checkpoints" / "step_000001"):
        ModelOpponent(str(given))  # loads (a ModelLoadError before)
    pytest.importorskip("textarena")
    from ragen.envs import make

    env = make("ta_tictactoe", opponent="checkpoint", opponent_model=str(run))
    first = env.reset(0, rng_seed=0)
    obs, _, _, _, info = env.step(env.oracle_action())
    assert obs != first and env.env_error is None  # the frozen run answered a move


# -- item 11: eval and view outputs on a full or read-only disk -------------------------------
class _FullDisk:
    """``open`` where files named ``*.tmp`` fill the disk after their first write (what a
    writer meets on a full disk), or, with ``read_only``, every file refuses to open."""

    def __init__(self, read_only: bool = False):
        self.read_only = read_only

    def __call__(self, path, mode="r", *args, **kwargs):
        import builtins

        if self.read_only and "w" in mode:
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        f = builtins.open(path, mode, *args, **kwargs)
        if not str(path).endswith(".tmp"):
            return f
        write = f.write
        calls = []

        def fill(data):
            calls.append(data)
            if len(calls) > 1:
                raise OSError(errno.ENOSPC, "No space left on device", str(path))
            return write(data)

        f.write = fill
        return f


def _error_line(capsys, command: str) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    (line,) = [x for x in err.splitlines() if x.startswith(f"ragen {command}: error:")]
    return line


def test_eval_out_on_a_full_disk_is_one_line_and_leaves_no_empty_file(
    tmp_path, monkeypatch, capsys
):
    """The probe: a traceback, and a 0-byte trajectories.jsonl left behind."""
    import ragen.cli_utils as cli_utils

    out = tmp_path / "eval"
    monkeypatch.setattr(cli_utils, "open", _FullDisk(), raising=False)
    code = main(["eval", "--model", "oracle", "--env", "bandit", "--n", "4", "--out", str(out)])
    line = _error_line(capsys, "eval")
    assert code == 2 and "disk full while writing trajectories.jsonl" in line
    assert "Fix: free space on that disk, or another --out" in line
    assert list(out.iterdir()) == []  # no empty or cut-off trajectories.jsonl, no .tmp


@pytest.mark.parametrize("command", ["eval", "view"])
def test_an_out_folder_on_a_read_only_disk_is_one_line_before_any_work(
    command, tmp_path, monkeypatch, capsys
):
    import ragen.cli_utils as cli_utils
    from ragen.viewer.synthetic import synthesize

    run = tmp_path / "run"
    synthesize(run, steps=1, episodes=2)
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr(cli_utils, "open", _FullDisk(read_only=True), raising=False)
    args = (
        ["eval", "--model", "oracle", "--env", "bandit", "--n", "2", "--out", str(out)]
        if command == "eval"
        else ["view", str(run), "--out", str(out)]
    )
    assert main(args) == 2
    line = _error_line(capsys, command)
    assert f"--out {out}: cannot write anything (Read-only file system)" in line
    assert "Fix: choose a writable folder" in line and list(out.iterdir()) == []


def test_view_out_on_a_disk_that_fills_is_one_line(tmp_path, monkeypatch, capsys):
    import ragen.viewer.site as site
    from ragen.viewer.synthetic import synthesize

    run = tmp_path / "run"
    synthesize(run, steps=1, episodes=2)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(site.shutil, "copyfile", full)
    assert main(["view", str(run), "--out", str(tmp_path / "site")]) == 2
    assert "disk full while writing the site" in _error_line(capsys, "view")


# -- item 12: ragen sft --lora-rank -1 -------------------------------------------------------
def test_sft_refuses_a_negative_lora_rank(tiny_model_dir, tmp_path, capsys):
    """The probe: `ragen sft --lora-rank -1` silently did full fine-tuning."""
    out = tmp_path / "sft"
    code = main(["sft", "--model", tiny_model_dir, "--env", "bandit", "--out", str(out),
                 "--lora-rank", "-1"])  # fmt: skip
    line = _error_line(capsys, "sft")
    assert code == 2 and "lora_rank: must be >= 0" in line and "--lora-rank 8" in line
    assert not out.exists()  # nothing trained, nothing written


# -- item 12: a stall or an error exit keeps the trained steps and says how to resume ---------
def _failing_at_step_2(monkeypatch, how: str):
    """``train_step`` as it is for step 1; at step 2 the env server is gone (``"env"``:
    the rollout's EnvUnavailableError) or the step trains nothing (``"stall"``)."""
    from ragen.errors import EnvUnavailableError
    from ragen.trainer.starpo import StarPOTrainer

    real = StarPOTrainer.train_step

    def step(self, index):
        if index == 0:
            return real(self, index)
        if how == "env":
            raise EnvUnavailableError(
                "4 of 4 episodes ended because the environment failed. Fix: the env's server"
            )
        metrics = real(self, index)
        self._step_trained, self._skip_reason = False, "filter"
        return metrics

    monkeypatch.setattr(StarPOTrainer, "train_step", step)


@pytest.mark.parametrize("how", ["env", "stall"])
def test_an_error_exit_saves_the_trained_steps_and_prints_the_resume_command(
    how, tiny_model_dir, tmp_path, monkeypatch, capsys
):
    """The probe: a stall (trainer.max_consecutive_skipped_steps) or an env that failed
    past rollout.max_env_error_share ended the run without saving the steps trained since
    the last checkpoint, and without the command that resumes. With save_every=0 nothing
    was on disk at all."""
    import shlex

    from test_trainer_train import _overrides

    run = tmp_path / "run"
    args = _overrides(tiny_model_dir, run, "bandit", "grpo", steps=3)
    args += ["trainer.save_every=0", "trainer.val_every=0",
             "trainer.max_consecutive_skipped_steps=1"]  # fmt: skip
    _failing_at_step_2(monkeypatch, how)
    assert main(["train", *args]) == 2
    line = _error_line(capsys, "train")
    saved = "step 2" if how == "stall" else "step 1"
    assert f"Saved {saved} to {run}/checkpoints/step_00000{saved[-1]}" in line
    assert "To resume: ragen train " in line and line.endswith("trainer.resume=auto")
    assert (run / "checkpoints" / f"step_00000{saved[-1]}").is_dir()
    if how == "env":  # the printed command resumes the run and finishes it
        monkeypatch.undo()
        command = shlex.split(line.split("To resume: ")[1])
        assert command[:2] == ["ragen", "train"] and main(command[1:]) == 0
        assert "resumed from" in capsys.readouterr().out

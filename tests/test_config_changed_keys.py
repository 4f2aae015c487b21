"""A run's first console lines: where its config is, and what differs from the defaults
(not the whole YAML, which drowned the first screen)."""

from ragen.trainer.config import changed_keys, load_config


def test_changed_keys_are_the_overrides_and_what_the_presets_set():
    cfg = load_config(["env=sokoban", "algo=drgrpo", "rollout.env_groups=4"])
    changed = changed_keys(cfg)
    assert changed["rollout.env_groups"] == 4 and changed["algo.name"] == "drgrpo"
    assert "rollout.group_size" not in changed  # left at its default
    assert changed_keys(load_config([])) == {}


def test_a_run_prints_its_folder_and_its_changes_not_the_yaml(one_bandit_step, tmp_path, capsys):
    from ragen.trainer.starpo import StarPOTrainer

    StarPOTrainer(load_config(one_bandit_step)).train()
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"run folder: {tmp_path / 'run'} (config: {tmp_path / 'run' / 'config.yaml'})"
    assert out[1].startswith("changed from the defaults: ") and "algo.name=grpo" in out[1]
    assert not any(line.startswith("rollout:") for line in out)  # no YAML section headers

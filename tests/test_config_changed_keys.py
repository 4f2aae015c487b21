"""A run's first console lines: where its config is, and what differs from the defaults
(not the whole YAML, which drowned the first screen)."""

from ragen.trainer.config import changed_keys, load_config


def test_changed_keys_are_the_overrides_and_what_the_presets_set():
    cfg = load_config(["env=sokoban", "algo=drgrpo", "rollout.env_groups=4"])
    changed = changed_keys(cfg)
    assert changed["rollout.env_groups"] == 4 and changed["algo.name"] == "drgrpo"
    assert "rollout.group_size" not in changed  # left at its default
    assert changed_keys(load_config([])) == {}


def test_a_run_prints_its_folder_and_its_changes_not_the_yaml(tiny_model_dir, tmp_path, capsys):
    from ragen.trainer.starpo import StarPOTrainer

    cfg = load_config(
        [
            "env=bandit",
            "model=tiny",
            f"model.path={tiny_model_dir}",
            "algo=grpo",
            "rollout.env_groups=2",
            "rollout.group_size=2",
            "algo.ppo_mini_batch_size=4",
            "trainer.total_steps=1",
            "trainer.val_every=0",
            f"trainer.run_dir={tmp_path / 'run'}",
        ]
    )
    StarPOTrainer(cfg).train()
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"run folder: {tmp_path / 'run'} (config: {tmp_path / 'run' / 'config.yaml'})"
    assert out[1].startswith("changed from the defaults: ") and "algo.name=grpo" in out[1]
    assert not any(line.startswith("rollout:") for line in out)  # no YAML section headers

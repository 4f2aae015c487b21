"""Every grid study preset (experiments/grids/configs) loads and each of its RL variants
is a valid ``ragen train`` config, so a preset's mistake shows here, not minutes into a
sweep."""

import pytest

from experiments.grids import run
from experiments.grids.config import CONFIG_DIR, load_study_config
from ragen.trainer.config import load_config

PRESETS = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


@pytest.mark.parametrize("name", PRESETS)
def test_every_rl_variant_of_every_preset_is_a_valid_training_run(name, tmp_path):
    cfg = load_study_config(name, ["device=cpu"])  # the GPU presets, checked on a CPU
    for env in cfg.envs:
        for variant in cfg.rl.variants:
            items = run.rl_overrides(tmp_path, cfg, env, cfg.seeds[0], variant, None)
            load_config(items)


def test_command_line_variants_replace_or_add():
    from experiments.grids.config import load_study_config

    whole = load_study_config("smollm2-gpu-sk", ["rl.variants={fast: [model.actor_lr=5e-5]}"])
    assert whole.rl.variants == {"fast": ["model.actor_lr=5e-5"]}
    added = load_study_config("smollm2-gpu-sk", ["rl.variants.fast=[model.actor_lr=5e-5]"])
    assert set(added.rl.variants) == {"one-step", "five-steps", "fast"}

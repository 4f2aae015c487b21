"""Validation states are held out by construction: no training, SFT or validation draw
shares an initial state with the other split (not only a seed)."""

import pytest

from ragen.agent.env_manager import HELD_OUT_EVERY, VAL_SEED_START, EnvStateManager
from ragen.envs import make
from ragen.errors import UsageError
from ragen.sft.expert_data import SFT_SEED_STEP


def _states(env_name, seeds, config=None):
    env = make(env_name, **(config or {}))
    keys = []
    for seed in seeds:
        env.reset(seed)
        keys.append(env.state_key())
    return keys


@pytest.mark.parametrize(
    "env_name, config",
    [("sokoban", {}), ("frozen_lake", {}), ("frozen_lake", {"p": 0.8}), ("countdown", {})],
)
def test_training_sft_and_validation_states_never_meet(env_name, config):
    train = EnvStateManager(env_name, config, env_groups=8, group_size=1, seed=0)
    train_seeds = [s for step in range(200) for s in train.seeds_for_step(step)]
    sft = EnvStateManager(env_name, config, env_groups=2048, group_size=1, seed=0)
    sft_seeds = sft.seeds_for_step(SFT_SEED_STEP)
    val = EnvStateManager(env_name, config, env_groups=256, group_size=1, seed=0)
    val_seeds = val.validation_seeds(256)
    assert all(s < VAL_SEED_START for s in train_seeds + sft_seeds)
    assert all(s >= VAL_SEED_START for s in val_seeds)
    val_states = set(_states(env_name, val_seeds, config))
    assert len(val_states) > 64  # a real validation set, not a handful of rooms
    assert not val_states & set(_states(env_name, train_seeds, config))
    assert not val_states & set(_states(env_name, sft_seeds, config))


def test_a_seed_split_alone_would_leak_states():
    """Why the split is on states: consecutive seed ranges share rooms (this is what the
    old split did; the test above fails for it)."""
    train = _states("frozen_lake", range(1600))
    val = _states("frozen_lake", range(VAL_SEED_START, VAL_SEED_START + 256))
    assert set(val) & set(train)


def test_validation_list_is_fixed_and_about_one_state_in_eight():
    m = EnvStateManager("sokoban", env_groups=4, group_size=2)
    seeds = m.validation_seeds(64)
    assert seeds == EnvStateManager("sokoban", env_groups=1, group_size=1).validation_seeds(64)
    assert m.validation_seeds(8, offset=10) == seeds[10:18]  # offsets index one list
    span = seeds[-1] - VAL_SEED_START + 1  # candidates tried to find 64 states
    assert 0.5 * HELD_OUT_EVERY < span / 64 < 2 * HELD_OUT_EVERY


def test_training_seeds_are_pure_and_differ_by_run_seed():
    a = EnvStateManager("sokoban", env_groups=8, group_size=2, seed=3)
    b = EnvStateManager("sokoban", env_groups=8, group_size=2, seed=3)
    assert a.seeds_for_step(5) == b.seeds_for_step(5)
    assert a.seeds_for_step(5) != EnvStateManager("sokoban", env_groups=8, seed=4).seeds_for_step(5)


def test_envs_without_a_state_split_use_the_seed_ranges():
    m = EnvStateManager("bandit", env_groups=4, group_size=2)
    assert m.held_out(7) is None
    assert m.validation_seeds(4) == [VAL_SEED_START + i for i in range(4)]


@pytest.mark.parametrize("offset", [-1, -100])
def test_negative_seed_offset_is_a_clear_error(offset):
    m = EnvStateManager("sokoban", env_groups=2, group_size=1)
    with pytest.raises(UsageError, match="--seed-offset"):
        m.validation_seeds(2, offset=offset)


def test_an_env_with_one_initial_state_says_how_to_fix_it():
    from fakes import LineEnv

    class OneState(LineEnv):
        def state_key(self):
            return "the only state"

    m = EnvStateManager(OneState, env_groups=1, group_size=1)
    split = "validation" if m.held_out(0) is False else "training"
    with pytest.raises(UsageError, match="state_key"):
        m.validation_seeds(1) if split == "validation" else m.seeds_for_step(0)


def test_expert_data_on_validation_states_for_held_out_probes(tiny_model_dir):
    from ragen.agent.rollout import RolloutConfig
    from ragen.models import load_policy
    from ragen.sft.config import SFTConfig
    from ragen.sft.expert_data import make_expert_data

    _, tok = load_policy(tiny_model_dir)
    cfg = SFTConfig(env="frozen_lake", episodes=16, rollout=RolloutConfig(max_turns=2))
    train = make_expert_data(tok, cfg)
    probe = make_expert_data(tok, cfg, split="validation")
    assert all(t.seed < VAL_SEED_START for t in train)
    assert all(t.seed >= VAL_SEED_START for t in probe)
    assert not set(_states("frozen_lake", [t.seed for t in probe])) & set(
        _states("frozen_lake", [t.seed for t in train])
    )
    with pytest.raises(UsageError, match="split"):
        make_expert_data(tok, cfg, split="test")


def test_a_training_pool_draws_every_group_from_n_distinct_training_states():
    """``env.train_states=N``: every training group of every step comes from one fixed
    pool of N distinct, non-validation initial states (the same pool on every call)."""
    m = EnvStateManager("sokoban", env_groups=16, group_size=2, seed=0, train_states=5)
    pool = m.train_pool()
    assert len(pool) == 5 and len(set(_states("sokoban", pool))) == 5
    drawn = [s for step in range(20) for s in m.seeds_for_step(step)]
    assert set(drawn) == set(pool)  # 320 draws reach every pool state and nothing else
    val = set(_states("sokoban", m.validation_seeds(128)))
    assert not val & set(_states("sokoban", pool))
    again = EnvStateManager("sokoban", env_groups=16, group_size=2, seed=0, train_states=5)
    assert again.seeds_for_step(7) == m.seeds_for_step(7)


def test_a_training_pool_larger_than_the_env_has_states_says_how_to_fix_it():
    from fakes import LineEnv

    class TwoStates(LineEnv):
        def _reset(self, seed):
            super()._reset(seed)
            self.room = seed % 2

        def state_key(self):
            return f"room {self.room}"

    m = EnvStateManager(TwoStates, env_groups=2, group_size=1, seed=0, train_states=3)
    with pytest.raises(UsageError, match="smaller env.train_states"):
        m.train_pool()
    with pytest.raises(UsageError, match="env.train_states must be >= 0"):
        EnvStateManager("bandit", env_groups=2, group_size=1, train_states=-1)

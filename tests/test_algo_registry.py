"""The advantage-estimator registry and its uniform calling convention."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from ragen.algo import (
    compute_gae,
    get_advantage_estimator,
    list_advantage_estimators,
    needs_critic,
    register_advantage_estimator,
)
from ragen.algo import registry as registry_module

BUILTINS = [
    "bi_level_gae",
    "drgrpo",
    "gae",
    "grpo",
    "masked_gae",
    "reinforce_plus_plus",
    "rloo",
    "turn_gae",
]


def test_builtin_names_and_needs():
    assert set(BUILTINS) <= set(list_advantage_estimators())
    assert [n for n in BUILTINS if needs_critic(n)] == [
        "bi_level_gae",
        "gae",
        "masked_gae",
        "turn_gae",
    ]
    estimators = [get_advantage_estimator(n) for n in BUILTINS]
    assert [e.name for e in estimators if e.needs_turn_ends] == ["bi_level_gae", "turn_gae"]
    assert [e.name for e in estimators if e.needs_index] == ["drgrpo", "grpo", "rloo"]


def test_optional_data_args_go_only_to_estimators_that_declare_them():
    takes_bootstrap = [
        n for n in BUILTINS if "bootstrap_value" in get_advantage_estimator(n).data_params
    ]
    assert takes_bootstrap == ["bi_level_gae", "gae", "masked_gae", "turn_gae"]
    takes_adv_mask = [
        n for n in BUILTINS if "advantage_mask" in get_advantage_estimator(n).data_params
    ]
    assert takes_adv_mask == ["masked_gae"]
    for name in BUILTINS:  # data, never hyper-parameters
        est = get_advantage_estimator(name)
        assert not {"bootstrap_value", "advantage_mask"} & set(est.hyper_params)


def test_unknown_name_lists_available():
    with pytest.raises(KeyError, match="available: bi_level_gae"):
        get_advantage_estimator("ppo")


def test_every_builtin_runs_with_one_shared_call():
    gen = torch.Generator().manual_seed(0)
    rewards = torch.randn(4, 6, generator=gen)
    mask = torch.tensor([[0, 1, 1, 0, 1, 1]] * 4)
    inputs = dict(
        token_level_rewards=rewards,
        response_mask=mask,
        values=torch.randn(4, 6, generator=gen),
        index=[0, 0, 1, 1],
        turn_end_mask=torch.tensor([[0, 0, 1, 0, 0, 1]] * 4),
        bootstrap_value=torch.zeros(4),
        advantage_mask=mask,
    )
    # One config dict for all estimators; each takes only what it declares.
    hyper = dict(gamma=0.99, lam=0.95, gamma_turn=0.9, lam_turn=1.0, gamma_token=1.0,
                 lam_token=1.0, norm_by_std=True, epsilon=1e-6)  # fmt: skip
    for name in BUILTINS:
        adv, ret = get_advantage_estimator(name)(**inputs, **hyper)
        assert adv.shape == ret.shape == (4, 6), name
        assert (adv[mask == 0] == 0).all(), name
    adv, _ = get_advantage_estimator("gae")(**inputs, **hyper)
    torch.testing.assert_close(adv, compute_gae(rewards, inputs["values"], mask, 0.99, 0.95)[0])


def test_missing_inputs_and_typos_raise():
    rewards, mask = torch.zeros(2, 3), torch.ones(2, 3)
    with pytest.raises(ValueError, match="critic values"):
        get_advantage_estimator("gae")(token_level_rewards=rewards, response_mask=mask)
    with pytest.raises(ValueError, match="index"):
        get_advantage_estimator("grpo")(token_level_rewards=rewards, response_mask=mask)
    with pytest.raises(ValueError, match="turn_end_mask"):
        get_advantage_estimator("bi_level_gae")(
            token_level_rewards=rewards, response_mask=mask, values=rewards
        )
    with pytest.raises(TypeError, match="lamda"):
        get_advantage_estimator("gae")(
            token_level_rewards=rewards, response_mask=mask, values=rewards, lamda=0.9
        )


def test_register_custom_estimator():
    @register_advantage_estimator("test_sign_of_score")
    def compute_sign(token_level_rewards, response_mask, index, scale: float = 1.0):
        score = (token_level_rewards * response_mask).sum(-1, keepdim=True)
        adv = torch.sign(score) * scale * response_mask
        return adv, adv

    try:
        est = get_advantage_estimator("test_sign_of_score")
        assert est.needs_index and not est.needs_critic and not est.needs_turn_ends
        adv, _ = est(token_level_rewards=torch.tensor([[1.0], [-2.0]]),
                     response_mask=torch.ones(2, 1), index=[0, 0], scale=2.0, gamma=0.5)  # fmt: skip
        assert adv.tolist() == [[2.0], [-2.0]]
        with pytest.raises(ValueError, match="already registered"):
            register_advantage_estimator("test_sign_of_score")(
                lambda token_level_rewards, response_mask: None
            )
        with pytest.raises(TypeError, match="response_mask"):
            register_advantage_estimator("test_bad")(lambda token_level_rewards: None)
    finally:
        registry_module._REGISTRY.pop("test_sign_of_score", None)


def test_algo_imports_no_trainer_envs_or_transformers():
    code = (
        "import sys, ragen.algo; "
        "bad = [m for m in sys.modules if m.split('.')[0] == 'transformers' "
        "or m.startswith(('ragen.trainer', 'ragen.envs', 'ragen.agent'))]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr

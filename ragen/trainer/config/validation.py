"""Reject a config that cannot run, before anything expensive happens, in one line that
names the full key, the problem and the fix.

:func:`validate` checks every key against its field (choices, ranges, custom checks:
``ragen.config_fields``), the env's options, what the machine can hold, and the keys
that must agree with each other (what the advantage estimator needs is asked of its
registry). :func:`apply_rollback_change` is a validated copy of a config with a
rollback's change applied (``ragen.trainer.collapse_guard``); :func:`validate` tries it
at load time, so a change that would make the config invalid fails now, not at the
first warning.
"""

from __future__ import annotations

import copy
import importlib.util
import math
import os
import re
import sys
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from ragen import envs
from ragen.agent.env_manager import VAL_SEED_START
from ragen.agent.rollout import RolloutConfig
from ragen.algo.registry import (
    critic_free_estimators,
    get_advantage_estimator,
    list_advantage_estimators,
)
from ragen.config_fields import check_section, default_of, fail, walk_fields
from ragen.errors import ConfigError

from .algo import FilterConfig
from .env import EnvSection
from .rollback import parse_rollback_change
from .train_config import TrainConfig
from .trainer_section import TrainerSection


def validate(cfg: TrainConfig, rollback_dry_run: bool = True) -> None:
    """Reject a config that cannot run, naming the full key, the problem and the fix.

    Order: every key against its field's choices and custom check (the metadata of
    ``ragen.config_fields.option``) and the env's options, then every key's range, then
    the keys that must agree, so the most basic problem is the one reported.
    """
    check_section(cfg, what="choices")
    _check_lists(cfg)
    envs.check_options(cfg.env.name, cfg.env.config, "env.config")
    envs.check_options(cfg.env.name, cfg.env.val_config, "env.val_config")
    check_section(cfg, what="ranges")
    _check_sizes(cfg)
    cfg.rollout.validate(prefix="rollout.")
    _check_curriculum(cfg.env)
    _check_filter(cfg.algo.filter)
    _check_scale_out(cfg.trainer, cfg.rollout)
    if cfg.algo.dynamic_sampling.enabled and cfg.env.train_states:
        fail("algo.dynamic_sampling.enabled", "refills draw fresh states; they cannot use "
              "the fixed pool of env.train_states", "env.train_states=0")  # fmt: skip
    _check_combinations(cfg)
    t = cfg.trainer
    if rollback_dry_run and t.on_collapse == "rollback" and t.rollback_change:
        # a change that makes the config invalid must fail now, not at the first warning
        try:
            apply_rollback_change(cfg, list(t.rollback_change))
        except ConfigError as err:
            raise ConfigError(
                f"trainer.rollback_change {list(t.rollback_change)} would make the config "
                f"invalid: {err}"
            ) from None


# -- container keys ------------------------------------------------------------------
_MODULE_NAME = re.compile(r"^[A-Za-z_][\w.]*$")


def _check_lists(cfg: TrainConfig) -> None:
    """Every list of strings holds strings (OmegaConf keeps ``[[]]`` as a list in a
    list), and LoRA's targets are module names: a bad one failed only after the model
    loaded, with a traceback from inside PEFT."""
    for key, f, value in walk_fields(cfg):
        if str(f.type).startswith("list[str]") and isinstance(value, list):
            for item in value:
                if not isinstance(item, str) or not item.strip():
                    default = default_of(f)
                    fail(key, f"must be a list of non-empty strings, got the item {shown(item)}",
                          f"e.g. {key}=[{','.join(map(str, default[:2]))}]" if default
                          else f"e.g. {key}=[]")  # fmt: skip
    lora = cfg.model.lora
    for name in lora.target_modules:
        if not _MODULE_NAME.match(name):
            fail("model.lora.target_modules", f"{name!r} is not a module name (letters, "
                  "digits, _ and dots)", "e.g. model.lora.target_modules=[q_proj,v_proj]")  # fmt: skip
    if lora.rank > 0 and not lora.target_modules:
        fail("model.lora.target_modules", f"is empty, so model.lora.rank={lora.rank} would "
              "train no adapter at all", "name the modules, e.g. "
              "model.lora.target_modules=[q_proj,v_proj], or model.lora.rank=0 (full "
              "fine-tuning)")  # fmt: skip


# -- sizes: what the machine can hold -----------------------------------------------------
#: a config integer past int64 cannot reach torch, numpy or a checkpoint's files
INT64 = (-(2**63), 2**63 - 1)
#: what one episode holds at the least, measured (tracemalloc, 500 envs reset): the
#: smallest env instance after reset (bandit 3.5 KB; Sokoban 7.9 KB), before its
#: trajectory record and prompt text are counted
EPISODE_FLOOR_BYTES = 3_000
#: a token an episode may hold costs at least its id in the batch's int64 tensor (the
#: batch is padded to its longest episode, which may reach rollout.max_model_len)
TOKEN_FLOOR_BYTES = 8
#: a rollout worker or training rank is a Python process with torch, before its model
#: copy: 270 MB resident measured with torch and transformers imported and no model yet
PROCESS_FLOOR_BYTES = 250 * 2**20


def machine_memory() -> int | None:
    """This machine's physical memory in bytes (None when the system cannot tell)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _number(value: int) -> str:
    """``value`` for a message; a huge one by its size (``str`` of an int of more than
    4,300 digits raises)."""
    digits = len(str(abs(value))) if value.bit_length() < 10_000 else int(value.bit_length() * 0.30103) + 1  # fmt: skip
    return f"{value:,}" if digits <= 30 else f"a {digits:,}-digit number"


def _gb(n: int) -> str:
    return f"{n / 1e9:,.1f} GB" if n < 1e15 else f"{n:.1e} bytes"


def _check_sizes(cfg: TrainConfig, memory: int | None = None) -> None:
    """Bound every size and count key by what the machine can hold, before anything is
    built: every integer fits in int64, the episodes a step holds (training and
    validation, each up to rollout.max_model_len tokens) fit in this machine's memory at
    their floor cost, as do the micro-batch's tokens and the processes of a scale-out,
    and env.train_states fits in the training seed range. A size past these ran for
    minutes before failing (``rollout.env_groups=99999999999999999999999``)."""
    for key, f, value in walk_fields(cfg):
        if isinstance(value, int) and not isinstance(value, bool):
            if not INT64[0] <= value <= INT64[1]:
                default = default_of(f)
                fail(key, f"{_number(value)} does not fit in 64 bits (what torch, numpy "
                      "and checkpoints hold)", f"e.g. the default {default}")  # fmt: skip
    r, t, a = cfg.rollout, cfg.trainer, cfg.algo
    if cfg.env.train_states > VAL_SEED_START:
        fail("env.train_states", f"{_number(cfg.env.train_states)} training states cannot be "
              f"drawn from the {VAL_SEED_START:,} training seeds", "a smaller pool, e.g. "
              "env.train_states=64, or 0 for a fresh state per group")  # fmt: skip
    memory = machine_memory() if memory is None else memory
    if not memory:
        return
    train, val = r.env_groups * r.group_size, t.val_groups
    episode = EPISODE_FLOOR_BYTES + TOKEN_FLOOR_BYTES * r.max_model_len
    need = (train + val) * episode
    if need > memory:
        crowd = "rollout.env_groups" if train >= val else "trainer.val_groups"
        fail(
            crowd if (train + val) * EPISODE_FLOOR_BYTES > memory else "rollout.max_model_len",
            f"rollout.env_groups={_number(r.env_groups)} x rollout.group_size="
            f"{_number(r.group_size)} training and trainer.val_groups={_number(val)} "
            f"validation episodes of up to rollout.max_model_len={_number(r.max_model_len)} "
            f"tokens need at least {_gb(need)} ({EPISODE_FLOOR_BYTES:,} bytes an env, "
            f"{TOKEN_FLOOR_BYTES} a token), more than this machine's {_gb(memory)} of memory",
            "fewer rollout.env_groups, rollout.group_size or trainer.val_groups, or a "
            "shorter rollout.max_model_len",
        )
    if a.micro_token_budget * TOKEN_FLOOR_BYTES > memory:
        fail("algo.micro_token_budget", f"{_number(a.micro_token_budget)} tokens a "
              f"micro-batch need more than this machine's {_gb(memory)} of memory",
              "0 picks what fits in memory; e.g. 8192")  # fmt: skip
    processes = t.rollout_workers + (t.train_ranks if t.train_ranks > 1 else 0)
    cluster = t.ray_address or os.environ.get("RAY_ADDRESS")  # its nodes hold them, not this one
    if not cluster and processes * PROCESS_FLOOR_BYTES > memory:
        key = "trainer.rollout_workers" if t.rollout_workers else "trainer.train_ranks"
        fail(key, f"trainer.rollout_workers={_number(t.rollout_workers)} and "
              f"trainer.train_ranks={_number(t.train_ranks)} are {_number(processes)} "
              f"processes of at least {PROCESS_FLOOR_BYTES >> 20} MB each (a Python process "
              f"with torch), more than this machine's {_gb(memory)} of memory",
              "fewer workers or ranks, or join a cluster (trainer.ray_address)")  # fmt: skip


def _check_curriculum(env: EnvSection) -> None:
    c = env.curriculum
    if c.start is None:
        return
    if not getattr(envs.spec(env.name).load_class(), "difficulty_meaning", ""):
        fail("env.curriculum.start", f"env {env.name!r} cannot rank its states by "
              "difficulty (Env.difficulty)", "env.curriculum.start=null")  # fmt: skip
    if env.train_states:
        fail("env.curriculum.start", "a curriculum draws fresh states; it cannot use the "
              "fixed pool of env.train_states", "env.train_states=0")  # fmt: skip
    if c.stop is not None and not c.stop >= c.start:
        fail("env.curriculum.stop", f"must be >= start ({c.start}), got {c.stop}", "or null")


def _check_filter(f: FilterConfig) -> None:
    """``algo.filter.value``'s range depends on the strategy."""
    if f.strategy == "top_p" and not 0 < f.value <= 1:
        fail("algo.filter.value", f"top_p keeps a fraction in (0, 1], got {f.value}",
              "e.g. 0.25 (1.0 keeps every group)")  # fmt: skip
    if f.strategy == "nucleus" and not 0 < f.value <= 1 or f.strategy == "min_p" and not 0 <= f.value <= 1:  # fmt: skip
        fail("algo.filter.value",
              f"{f.strategy} takes a share of the metric in (0, 1], got {f.value}",
              "e.g. algo.filter.value=0.5")  # fmt: skip
    if f.strategy == "top_k" and f.value < 1:
        fail("algo.filter.value", f"top_k keeps a number of groups >= 1, got {f.value}",
              "e.g. algo.filter.value=4")  # fmt: skip


# what installs Ray (ragen.distributed.ray_setup says it too)
INSTALL_HINT = "pip install 'ragen[scale]'"


def ray_installed() -> bool:
    """Whether ``import ray`` would work, without importing it (config validation)."""

    if "ray" in sys.modules:
        return sys.modules["ray"] is not None
    return importlib.util.find_spec("ray") is not None


def _check_scale_out(t: TrainerSection, r: RolloutConfig) -> None:
    """The scale-out keys that must agree (any worker count suits any number of groups:
    extra workers idle)."""
    if t.train_sharding == "fsdp" and t.train_ranks > 1 and t.rollout_workers < 1:
        fail("trainer.train_sharding",
              "fsdp keeps no whole copy of the weights in the trainer, so it cannot generate "
              "rollouts in this process (trainer.rollout_workers=0)",
              "trainer.rollout_workers=1 or more (the workers hold the whole weights), or "
              "trainer.train_sharding=replicate")  # fmt: skip
    if t.rollout_workers > 0 or t.train_ranks > 1:
        if not ray_installed():
            key = "trainer.rollout_workers" if t.rollout_workers > 0 else "trainer.train_ranks"
            fail(key, "needs Ray, which is not installed",
                  f"{INSTALL_HINT}, or trainer.rollout_workers=0 trainer.train_ranks=1 "
                  "to run in one process")  # fmt: skip


def apply_rollback_change(
    cfg: TrainConfig, items: list[str]
) -> tuple[TrainConfig, dict[str, list]]:
    """A validated copy of ``cfg`` with ``items`` applied, and ``{key: [old, new]}``."""
    new = copy.deepcopy(cfg)
    changed: dict[str, list] = {}
    for key, op, value in parse_rollback_change(items):
        *path, leaf = key.split(".")
        node = new
        for part in path:
            node = getattr(node, part)
        old = getattr(node, leaf)
        if op == "scale":
            if isinstance(old, bool) or not isinstance(old, (int, float)):
                fail(
                    "trainer.rollback_change",
                    f"{key} is not a number and cannot be scaled",
                    "use key=value",
                )
            value = type(old)(old * value)
        setattr(node, leaf, value)
        changed[key] = [old, value]
    validate(new, rollback_dry_run=False)
    return new, changed


def _check_combinations(cfg: TrainConfig) -> None:
    """Keys that are each valid but cannot go together. What an estimator needs (a
    critic, turn ends, group ids, an advantage mask) is asked of the registry."""
    a, r = cfg.algo, cfg.rollout
    estimator = get_advantage_estimator(a.adv_estimator)
    if a.advantage_tokens != "response" and "advantage_mask" not in estimator.data_params:
        takes_mask = [n for n in list_advantage_estimators()
                      if "advantage_mask" in get_advantage_estimator(n).data_params]  # fmt: skip
        fail(
            "algo.advantage_tokens",
            f"{a.advantage_tokens!r} needs an estimator that takes an advantage mask "
            f"(M_adv), and {a.adv_estimator!r} does not",
            f"set algo.adv_estimator to {' or '.join(takes_mask)}, or "
            "algo.advantage_tokens=response",
        )
    if estimator.needs_critic and not a.use_critic:
        fail(
            "algo.use_critic",
            f"estimator {a.adv_estimator!r} needs a critic (value baseline) but use_critic=false",
            "set algo.use_critic=true or use a critic-free estimator "
            f"({', '.join(critic_free_estimators())})",
        )
    if cfg.trainer.critic_warmup and not a.use_critic:
        fail(
            "trainer.critic_warmup",
            f"{cfg.trainer.critic_warmup} steps of critic-only training, but there is no "
            f"critic (algo.use_critic=false, estimator {a.adv_estimator!r})",
            "set trainer.critic_warmup=0, or use a critic (algo.use_critic=true with gae)",
        )
    if estimator.needs_turn_ends and a.reward_placement != "turn":
        fail(
            "algo.reward_placement",
            f"{a.adv_estimator} assigns credit per turn and needs turn rewards at turn ends",
            "set algo.reward_placement=turn (the trico and vagen presets do)",
        )
    if a.reward_placement == "turn" and r.context_window is not None:
        # a windowed sample holds one turn: per-turn credit inside it would never see the
        # rewards of later turns (separate samples), silently making every turn myopic
        fail(
            "algo.reward_placement",
            "per-turn rewards need the whole episode in one sample, but rollout.context_window "
            f"={r.context_window} makes every turn its own sample",
            "drop rollout.context_window, or set algo.reward_placement=trajectory (each "
            "windowed turn is then credited with its reward-to-go)",
        )
    if a.reward_placement == "turn" and a.norm_grouping != "none":
        fail(
            "algo.norm_grouping",
            "score normalization rescales one score per trajectory and cannot apply to per-turn rewards",
            "set algo.norm_grouping=none, or algo.reward_placement=trajectory",
        )
    group_based = estimator.needs_index or a.norm_grouping == "state"
    if group_based and r.group_size < 2:
        fail(
            "rollout.group_size",
            "group baselines need at least 2 rollouts per initial state",
            "set rollout.group_size>=2",
        )
    kept_groups = r.env_groups
    if a.filter.strategy == "top_p":
        kept_groups = max(1, math.ceil(a.filter.value * r.env_groups))
    elif a.filter.strategy == "top_k":
        kept_groups = min(int(a.filter.value), r.env_groups)
    kept = kept_groups * r.group_size * (r.max_turns if r.context_window is not None else 1)
    if a.filter.strategy in ("top_p", "top_k") and kept < a.ppo_mini_batch_size:
        fail(
            "algo.ppo_mini_batch_size",
            f"the filter keeps {kept} trajectories per step ({kept_groups} of {r.env_groups} groups x "
            f"{r.group_size}), fewer than one minibatch of {a.ppo_mini_batch_size}",
            f"set algo.ppo_mini_batch_size<={kept}, or keep more groups (algo.filter.value) / "
            "raise rollout.env_groups",
        )


def shown(value: Any) -> str:
    """``value`` as a message shows it: short, a config node as plain data."""
    if isinstance(value, (DictConfig, ListConfig)):
        value = OmegaConf.to_container(value)
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."

"""``make demo``: an agent built from nothing learns to solve environments on a CPU.

Stages (each can be re-run alone with ``--stage``; results accumulate in
``<out>/results.json``):

    tiny     build the tiny tokenizer + Qwen2-style model (offline, seeded)
    sft      warm start per env: SFT on noisy expert (solver) trajectories
    rl       RL per env (StarPO-S; Dr.GRPO on FrozenLake), from the warm start
    eval     held-out validation seeds: random, oracle, warm start, after RL
    report   table (results.md) and learning curves (curves.png)

    python -m ragen.demo                       # everything, 17-20 min on 2 CPU cores
    python -m ragen.demo --budget classic      # the earlier demo, ~8 min (no grid gains)
    python -m ragen.demo --stage rl --env sokoban
    python -m ragen.demo --budget toy          # seconds; what the end-to-end test runs
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import multiprocessing
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from ragen.agent.evaluate import run_evaluation
from ragen.agent.metrics import success_by_state
from ragen.agent.reasoning import REASONING_FORMATS
from ragen.agent.reasoning_rewards import REASONING_REWARDS
from ragen.cli_utils import parse_key_values
from ragen.errors import UsageError
from ragen.models.tiny import create_tiny, describe
from ragen.parent_watch import exit_with_parent
from ragen.recipes import BUDGETS, ENV_SHAPE, Budget, rollout_overrides
from ragen.stats import Interval, paired_bootstrap
from ragen.viewer import build_site
from ragen.viz.report import upgrade_results, write_demo_report

DEFAULT_ENVS = ("bandit", "frozen_lake", "sokoban")
STAGES = ("tiny", "sft", "rl", "eval", "report")
#: evaluation samples at RAGEN's validation temperature
EVAL_TEMPERATURE = 0.5
#: what the results keep of each policy's evaluation (and its per-state outcomes)
EVAL_KEYS = ("success_rate", "reward_mean", "format_error_rate", "valid_action_rate")
#: validation groups per generate call in evaluation (512 FrozenLake or Sokoban prompts of
#: the tiny model fit in a few MB of KV cache; one batch is the fastest on 2 cores)
EVAL_BATCH = 512


def rl_gain(row: dict[str, Any]) -> Interval | None:
    """After RL minus the warm start on the same held-out states (``row``: one env's
    results with per-state outcomes), with its 95% paired-bootstrap interval; None when
    either evaluation is missing or was made before outcomes were kept per state."""
    before = row.get("warm start (SFT)", {}).get("per_state")
    after = row.get("after RL", {}).get("per_state")
    if not before or not after or len(before) != len(after):
        return None
    return paired_bootstrap([a - b for a, b in zip(after, before)])


class Demo:
    def __init__(
        self,
        out: Path,
        budget: Budget,
        envs: list[str],
        seed: int = 0,
        results: dict | None = None,
    ):
        self.out, self.budget, self.envs, self.seed = out, budget, envs, seed
        self.out.mkdir(parents=True, exist_ok=True)
        # a Demo handed its results (a worker process) leaves results.json to its parent
        self.persist = results is None
        self.results_path = out / "results.json"
        if results is not None:  # given by the parent process
            self.results = results
        else:
            self.results = upgrade_results(
                json.loads(self.results_path.read_text()) if self.results_path.exists() else {}
            )

    # -- helpers ---------------------------------------------------------------------
    def log(self, msg: str) -> None:
        print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def save_results(self) -> None:
        if not self.persist:
            return
        # write-then-rename: a reader never sees a half-written file
        tmp = self.results_path.with_name(self.results_path.name + ".tmp")
        tmp.write_text(json.dumps(self.results, indent=2, sort_keys=True))
        os.replace(tmp, self.results_path)

    @property
    def tiny_dir(self) -> Path:
        return self.out / "tiny"

    def sft_dir(self, env: str) -> Path:
        return self.out / env / "sft"

    def rl_dir(self, env: str) -> Path:
        return self.out / env / "rl"

    def final_actor(self, env: str) -> Path | None:
        ckpts = sorted((self.rl_dir(env) / "checkpoints").glob("step_*[0-9]"))
        return ckpts[-1] / "actor" if ckpts else None

    def _require(self, path: Path, stage: str) -> None:
        if not path.exists():
            raise UsageError(
                f"{path} is missing; run the '{stage}' stage first (python -m ragen.demo --stage {stage})"
            )

    # -- stages ----------------------------------------------------------------------
    def stage_tiny(self) -> None:
        self.log(f"building the tiny model ({describe(self.budget.tiny_size)}) in {self.tiny_dir}")
        create_tiny(self.tiny_dir, size=self.budget.tiny_size, seed=self.seed)

    def stage_sft(self, env: str) -> None:
        from ragen.sft.config import SFTConfig  # deferred: ragen.sft.trainer imports torch
        from ragen.sft.trainer import run_sft

        self._require(self.tiny_dir / "config.json", "tiny")
        shape, b = ENV_SHAPE[env], self.budget
        cfg = SFTConfig(
            env=env,
            env_config=b.env_config(env),
            rollout=shape.rollout(b, env),
            episodes=b.sft_episodes[env],
            epsilon=b.sft_epsilon[env],
            labels=b.sft_labels.get(env, "expert"),
            epochs=b.sft_epochs,
            actions_per_turn=shape.actions_per_turn,
            seed=self.seed,
            lr=b.sft_lr,
            batch_size=b.sft_batch_size[env],
        )
        changes = b.sft_overrides.get(env, {})
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(SFTConfig)})
        if unknown:
            raise UsageError(
                f"sft_overrides[{env!r}]: {unknown} are not SFTConfig fields "
                "(ragen.sft.config.SFTConfig). Fix: use its field names, e.g. lr, batch_size"
            )
        cfg = dataclasses.replace(cfg, **changes)
        if b.micro_token_budget is not None:
            cfg = dataclasses.replace(cfg, micro_token_budget=b.micro_token_budget)
        aux = (
            f" + {cfg.aux_episodes} in the {cfg.aux_reasoning} format" if cfg.aux_reasoning else ""
        )
        self.log(
            f"[{env}] SFT warm start on {cfg.episodes} noisy expert episodes "
            f"(epsilon={cfg.epsilon}, labels={cfg.labels}){aux}"
        )
        run_sft(str(self.tiny_dir), self.sft_dir(env), cfg, log=self.log)

    def mini_batch_size(self, env: str) -> int:
        """Samples per optimizer step: by default all StarPO-S keeps (a quarter of the
        step's episodes; windowed envs: their turns), one optimizer step per training step."""
        b = self.budget
        if env in b.ppo_mini_batch_size:
            return b.ppo_mini_batch_size[env]
        return (
            max(1, b.groups_of(env) * b.group_size_of(env) // 4)
            * ENV_SHAPE[env].samples_per_episode
        )

    def turns_of_work(self, env: str) -> int:
        """A rough size of ``env``'s pipeline: turns trained on in SFT and rolled in RL."""
        b, turns = self.budget, ENV_SHAPE[env].max_turns
        sft = b.sft_overrides.get(env, {})
        episodes = b.sft_episodes[env] + sft.get("aux_episodes", 0)
        rl = b.rl_steps[env] * b.groups_of(env) * b.group_size_of(env)
        return turns * (episodes * sft.get("epochs", b.sft_epochs) + rl)

    def stage_rl(self, env: str) -> None:
        # deferred: the trainer imports torch, which `ragen --help` need not wait for
        from ragen.trainer.config import load_config
        from ragen.trainer.starpo import StarPOTrainer

        self._require(self.sft_dir(env) / "config.json", "sft")
        if self.rl_dir(env).exists():
            shutil.rmtree(self.rl_dir(env))  # a re-run of this stage starts over
        b = self.budget
        steps = b.rl_steps[env]
        overrides = [
            *rollout_overrides(env, b),
            f"algo={b.algo_of(env)}",
            "model=tiny",  # the tiny preset's learning rates and lengths ...
            f"model.path={self.sft_dir(env)}",  # ... for this tiny:nano warm start
            f"rollout.env_groups={b.groups_of(env)}",
            f"rollout.group_size={b.group_size_of(env)}",
            f"algo.ppo_mini_batch_size={self.mini_batch_size(env)}",
            *([f"model.actor_lr={b.actor_lr[env]}"] if env in b.actor_lr else []),
            *([f"model.critic_lr={b.critic_lr[env]}"] if env in b.critic_lr else []),
            f"trainer.total_steps={steps}",
            f"trainer.val_every={max(1, steps // 4)}",
            f"trainer.val_groups={b.val_groups}",
            f"trainer.save_every={steps}",
            f"trainer.run_dir={self.rl_dir(env)}",
            f"trainer.seed={self.seed}",
            *b.extra,
            *(
                [f"algo.micro_token_budget={b.micro_token_budget}"]
                if b.micro_token_budget is not None
                else []
            ),
            *b.rl_extra.get(env, []),
        ]
        extra = f" ({', '.join(b.rl_extra[env])})" if b.rl_extra.get(env) else ""
        self.log(
            f"[{env}] {b.algo_of(env)}: {steps} steps of "
            f"{b.groups_of(env)}x{b.group_size_of(env)} rollouts{extra}"
        )
        StarPOTrainer(load_config(overrides)).train()

    def stage_eval(self, env: str) -> None:
        """Every policy on the same ``eval_episodes`` held-out states (one episode each,
        the same sampling seed), their per-state outcomes kept, and the RL gain as a
        paired difference over those states with its 95% bootstrap interval."""
        n = self.budget.eval_episodes
        shape = ENV_SHAPE[env]
        rollout = shape.rollout(self.budget, env)  # the same limits the agent trained under
        common = dict(
            env=env,
            n=n,
            temperature=EVAL_TEMPERATURE,
            max_turns=shape.max_turns,
            seed=self.seed,
            config=rollout,
            env_config=self.budget.env_config(env),
        )
        rows = self.results.setdefault(env, {})
        policies = {"random": "random", "oracle": "oracle"}
        if self.sft_dir(env).exists():
            policies["warm start (SFT)"] = str(self.sft_dir(env))
        actor = self.final_actor(env)
        if actor is not None:
            policies["after RL"] = str(actor)
        for name, model in policies.items():
            extra = {}
            if name in ("random", "oracle"):
                extra["actions_per_turn"] = shape.actions_per_turn
            played = run_evaluation(model, batch_groups=EVAL_BATCH, **common, **extra)
            metrics = played.metrics
            wins = success_by_state(played.trajectories)
            rows["states"] = sorted(wins)  # the held-out initial states, the same for all
            rows[name] = {
                **{k: metrics[k] for k in EVAL_KEYS if k in metrics},
                "episodes": len(wins),
                "per_state": [wins[s] for s in rows["states"]],
            }
            self.log(
                f"[{env}] {name:>20}: success {metrics['success_rate']:.1%} "
                f"reward {metrics['reward_mean']:+.3f} ({len(wins)} held-out states)"
            )
        gain = rl_gain(rows)
        if gain is not None:
            rows["rl_gain"] = gain.to_json()
            verdict = "above 0" if gain.low > 0 else "includes 0" if gain.high >= 0 else "below 0"
            self.log(
                f"[{env}] RL gain {gain.points().format()} points (after RL - warm start, "
                f"paired over {gain.n} held-out states, 95% bootstrap interval: {verdict})"
            )
        self.save_results()

    def stage_report(self) -> None:
        path = write_demo_report(
            self.out, self.results, self.envs, {env: self.rl_dir(env) for env in self.envs}
        )
        self.log(f"report: {path}")
        print((self.out / "results.md").read_text())

        index = build_site(self.out, self.out / "site")
        self.log(f"viewer: file://{index.resolve()} (or: ragen view {self.out} --serve)")

    def run_env(self, env: str, stages: list[str]) -> dict:
        """The per-env stages (sft, rl, eval) in order; returns ``results[env]``."""
        tic = time.perf_counter()
        for stage in stages:
            getattr(self, f"stage_{stage}")(env)
            self.log(f"[{env}] stage {stage} done ({time.perf_counter() - tic:.0f}s)")
        return self.results.get(env, {})

    def run(self, stages: list[str], jobs: int = 1) -> None:
        """``tiny``, then each env's pipeline (``jobs`` envs at a time), then ``report``.

        ``jobs > 1`` runs whole env pipelines in separate processes, each with an equal
        share of the CPU threads: the tiny models are too small for one process to keep
        several cores busy, so two single-threaded envs side by side finish sooner than
        two envs one after the other on two threads. One SFT is the exception: that of
        the budget's ``sft_first`` env (Sokoban's, the longest pipeline) runs first,
        alone, in this process on every thread (on 2 cores 1.7x its single-threaded
        speed), and only then do the pipelines go side by side; that shortens the
        demo's critical path, most of all when that SFT needs extra epochs
        (``SFTConfig.end_fit_min_reply_accuracy``). Its warm start is then the one
        ``--env sokoban --jobs 1`` trains too.
        """
        tic = time.perf_counter()
        if "tiny" in stages:
            self.stage_tiny()
        per_env = [s for s in stages if s in ("sft", "rl", "eval")]
        if per_env:
            if jobs > 1 and len(self.envs) > 1:
                done: dict[str, list[str]] = {}
                head = self.budget.sft_first
                if "sft" in per_env and head in self.envs:
                    self.log(
                        f"[{head}] SFT first, on every thread, before the envs run side by side"
                    )
                    self.run_env(head, ["sft"])
                    done[head] = ["sft"]
                self._run_envs_in_processes(per_env, jobs, done)
            else:
                for env in self.envs:
                    self.run_env(env, per_env)
        if "report" in stages:
            self.stage_report()
        self.log(f"demo done ({time.perf_counter() - tic:.0f}s elapsed)")

    def _run_envs_in_processes(
        self, stages: list[str], jobs: int, done: dict[str, list[str]] | None = None
    ) -> None:
        """Each env's ``stages`` (less those in ``done[env]``, already run) in a pool of
        ``jobs`` worker processes, the longest pipelines first."""

        jobs = min(jobs, len(self.envs))
        threads = max(1, (os.cpu_count() or 1) // jobs)
        self.log(f"running {len(self.envs)} envs, {jobs} at a time ({threads} thread(s) each)")
        ctx = multiprocessing.get_context("spawn")  # a clean torch in every worker
        failed: dict[str, BaseException] = {}
        with ProcessPoolExecutor(
            max_workers=jobs,
            mp_context=ctx,
            initializer=exit_with_parent,
            initargs=(os.getpid(),),
        ) as pool:
            futures = {
                pool.submit(
                    _env_worker,
                    self.out,
                    self.budget,
                    self.seed,
                    env,
                    [s for s in stages if s not in (done or {}).get(env, [])],
                    threads,
                    self.results.get(env, {}),  # workers never read results.json
                ): env
                # the longest pipelines first: a short one then fills the core it frees
                for env in sorted(self.envs, key=self.turns_of_work, reverse=True)
            }
            for future in as_completed(futures):
                env = futures[future]
                try:
                    self.results[env] = future.result()
                except Exception as err:  # keep the other envs going and their numbers
                    failed[env] = err
                    self.log(f"[{env}] FAILED: {type(err).__name__}: {err}")
                    continue
                self.save_results()  # each env's numbers are kept as soon as it finishes
        if failed:
            names = ", ".join(sorted(failed))
            raise RuntimeError(
                f"the demo failed for {names} (the other envs' results are in "
                f"{self.results_path}); fix the error above and re-run only those: "
                + " ".join(f"--env {e}" for e in sorted(failed))
            ) from next(iter(failed.values()))


class _EnvTaggedStream(io.TextIOBase):
    """A worker's stdout: each whole line gets its env's tag, so the interleaved output of
    side-by-side envs stays readable. Not a terminal, so no live display fights another."""

    def __init__(self, stream: Any, tag: str) -> None:
        self.stream, self.tag, self._partial = stream, tag, ""

    def write(self, text: str) -> int:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:  # the demo's own messages already name their env
            self.stream.write(f"{line}\n" if self.tag.strip() in line else f"{self.tag}{line}\n")
        self.stream.flush()
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False


def _env_worker(
    out: Path,
    budget: Budget,
    seed: int,
    env: str,
    stages: list[str],
    threads: int,
    results: dict,
) -> dict:
    """One env's pipeline in a worker process (module-level so that it pickles)."""
    import torch

    # a pool worker runs several envs one after another: tag with this one only
    stream = sys.stdout.stream if isinstance(sys.stdout, _EnvTaggedStream) else sys.stdout
    sys.stdout = _EnvTaggedStream(stream, f"[{env}] ")
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    demo = Demo(out, budget, [env], seed, results={env: results} if results else {})
    return demo.run_env(env, stages)


def default_jobs(num_envs: int) -> int:
    """One env per CPU core, at most one process per env."""
    return max(1, min(num_envs, os.cpu_count() or 1))


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m ragen.demo", description=__doc__.split("\n\n")[0])
    _add_args(p)
    return p.parse_args(argv)


def _add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="runs/demo", help="demo folder")
    p.add_argument(
        "--stage", choices=STAGES, action="append", help="run only these stages (repeatable)"
    )
    p.add_argument("--env", action="append", choices=DEFAULT_ENVS, help="only these environments")
    p.add_argument(
        "--budget",
        choices=sorted(BUDGETS),
        default="full",
        help="full: the demo (17-20 min on 2 cores); classic: the earlier ~8-minute demo, "
        "whose RL adds nothing on the grids; toy: the full pipeline in seconds",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the model, data and training")
    p.add_argument(
        "--reasoning",
        default=None,
        help="the grids' reply format: no_think, free_think, grounding, world_modeling, "
        "grounding_world_modeling, for every env (default: the budget's; full: no_think on the "
        "grids, free_think on the bandit)",
    )
    p.add_argument(
        "--reasoning-reward",
        action="append",
        default=[],
        metavar="NAME=WEIGHT",
        help="RL weight of a reasoning reward: grounding, world_model or consistency "
        "(repeatable; default: none, the rewards are only logged)",
    )
    p.add_argument(
        "--micro-token-budget",
        type=int,
        default=None,
        help="padded tokens per micro-batch in SFT and RL (default: SFT's automatic budget, "
        "16384 in RL). The same gradient summed in another order: how a run on another CPU "
        "rounds, repeated on this one",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="envs trained side by side in separate processes "
        "(default: one per CPU core, at most one per env; 1 = one after another)",
    )


def budget_from_args(args: argparse.Namespace) -> Budget:
    """The ``--budget`` preset with ``--reasoning``, ``--reasoning-reward`` and
    ``--micro-token-budget`` applied."""
    budget = BUDGETS[args.budget]
    changes: dict[str, Any] = {}
    if getattr(args, "reasoning", None) is not None:
        if args.reasoning not in REASONING_FORMATS:
            raise UsageError(
                f"--reasoning {args.reasoning!r} is not a format; use one of "
                f"{', '.join(REASONING_FORMATS)}"
            )
        budget = budget.playing(args.reasoning)
    budget_tokens = getattr(args, "micro_token_budget", None)
    if budget_tokens is not None:
        if budget_tokens < 1:
            raise UsageError(
                f"--micro-token-budget must be >= 1, got {budget_tokens}. Fix: e.g. 8192"
            )
        changes["micro_token_budget"] = budget_tokens
    weights = parse_key_values(getattr(args, "reasoning_reward", []) or [], "--reasoning-reward")
    if weights:
        unknown = sorted(set(weights) - set(REASONING_REWARDS))
        if unknown:
            raise UsageError(
                f"--reasoning-reward: unknown reward(s) {unknown}; use {', '.join(REASONING_REWARDS)}"
            )
        bad = {k: v for k, v in weights.items() if not isinstance(v, (int, float)) or v < 0}
        if bad:
            raise UsageError(f"--reasoning-reward: weights must be numbers >= 0, got {bad}")
        changes["reasoning_rewards"] = {k: float(v) for k, v in weights.items()}
    return dataclasses.replace(budget, **changes) if changes else budget


def run(args: argparse.Namespace) -> int:
    import torch

    torch.manual_seed(args.seed)

    envs = args.env or list(DEFAULT_ENVS)
    demo = Demo(Path(args.out), budget_from_args(args), envs, args.seed)
    jobs = args.jobs if args.jobs is not None else default_jobs(len(envs))
    if jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {jobs}")
    demo.run(args.stage or list(STAGES), jobs=jobs)
    return 0


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "demo", help="the end-to-end CPU demo (tiny model -> SFT -> StarPO-S -> eval)"
    )
    _add_args(p)
    p.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    return run(_parse(argv))


if __name__ == "__main__":
    sys.exit(main())

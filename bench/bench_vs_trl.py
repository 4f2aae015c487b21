"""GRPO steps/s and tokens/s: ``ragen train algo=grpo`` against TRL's ``GRPOTrainer``.

    .venv/bin/python -m pip install -c constraints.txt trl     # or: pip install -e '.[bench]'
    .venv/bin/python -m bench.bench_vs_trl                      # bandit, tiny:nano, 5 steps each
    .venv/bin/python -m bench.bench_vs_trl --steps 8 --threads 2 --engine eager
    python -m bench.bench_vs_trl --model smollm2 --device cuda --prompts 16 --group-size 16 \
        --max-new-tokens 64 --lr 1e-5 --steps 3           # SmolLM2 at batch 256 on a GPU

One process runs both trainers, one after the other, on the same task and budget:

* task: the single-turn ``bandit`` env; every step trains on ``--prompts`` initial
  states x ``--group-size`` samples (GRPO's group), ``--max-new-tokens`` per sample,
  temperature 1, no KL term (``beta=0`` / ``algo.kl_coef=0``: no reference model on
  either side), one optimizer step per step (ragen: ``ppo_mini_batch_size`` = the
  whole batch; TRL: one generation batch per optimizer step, ``num_iterations=1``),
  the same learning rate;
* model: the same ``tiny:nano`` weights (seed 0), written once to a folder both load, or
  ``--model`` (a folder, a ``.gguf`` file, converted once to a folder, or a preset name
  such as ``smollm2``); on a GPU both train float32 weights with bf16 autocast;
* prompts: ragen's own chat messages for each initial state (captured from a ragen
  rollout), which TRL renders with the same chat template; TRL's reward function
  parses the reply with ragen's parser and steps a bandit env reset to the same seed
  (reward + ragen's format penalty).

Timing: the first step of each is warm-up and not counted; steps/s = counted steps /
their seconds; tokens/s = generated (completion) tokens of the counted steps / the
same seconds. On a shared machine the load drifts between the two runs, so
``--rounds`` (default 2) repeats the pair with fresh trainers, alternating which goes
first, and sums the counted steps of all rounds. TRL generates with ``model.generate`` (transformers), ragen with its
own engine (``--engine``, default ``static``). TRL is a bench-only dependency (the
``bench`` extra); without it this prints how to install it and exits (status 0, so
``make bench`` goes on).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def capture_prompts(env: str, prompts: int, seed: int, tokenizer) -> list[dict]:
    """ragen's first-turn chat messages for ``prompts`` training states: ``[{prompt, seed}]``."""
    from ragen.agent.env_manager import EnvStateManager
    from ragen.agent.policies import Policy, PolicyOutput
    from ragen.agent.rollout import RolloutConfig, run_rollout

    rows: list[dict] = []

    class Capture(Policy):
        name = "capture"

        def act(self, requests, params):
            rows.extend({"prompt": r.messages, "seed": int(r.env.seed)} for r in requests)
            return [PolicyOutput(text="") for _ in requests]

    manager = EnvStateManager(env, env_groups=prompts, group_size=1, seed=seed)
    run_rollout(Capture(), manager, RolloutConfig(max_turns=1), manager.seeds_for_step(0))
    return rows


def bandit_reward(env_name: str, format_penalty: float):
    """TRL reward function: ragen's parse of the reply, then one step of the env."""
    import ragen.envs as envs
    from ragen.agent.reasoning import parse_response

    def reward(prompts, completions, seed, **kwargs) -> list[float]:
        out = []
        for completion, s in zip(completions, seed):
            text = completion[0]["content"] if isinstance(completion, list) else completion
            parsed = parse_response(text)
            if not parsed.format_ok or not parsed.actions:
                out.append(format_penalty)
                continue
            env = envs.make(env_name)
            env.reset(int(s))
            out.append(float(env.step(parsed.actions[0])[1]))
        return out

    return reward


def run_trl(model_dir: Path, data: list[dict], args, out_dir: Path) -> tuple[float, int, int]:
    """(seconds, completion tokens, steps) of TRL's counted steps."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    times: list[float] = []
    tokens: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.tic = time.perf_counter()

        def on_step_end(self, *a, **k):
            times.append(time.perf_counter() - self.tic)

        def on_log(self, _args, state, control, logs=None, **k):
            if logs and "completions/mean_length" in logs:
                tokens.append(logs["completions/mean_length"] * args.prompts * args.group_size)

    batch = args.prompts * args.group_size
    config = GRPOConfig(
        output_dir=str(out_dir),
        use_cpu=args.device == "cpu",
        bf16=args.device.startswith("cuda"),  # ragen's trainer autocasts to bf16 there too
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        num_generations=args.group_size,
        max_completion_length=args.max_new_tokens,
        temperature=1.0,
        top_p=1.0,
        beta=0.0,
        num_iterations=1,
        learning_rate=args.lr,
        max_steps=args.steps + 1,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=args.seed,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    repeats = -(-(args.steps + 1) * args.prompts // len(data)) + 1
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=bandit_reward(args.env, -0.1),
        args=config,
        train_dataset=Dataset.from_list(data * repeats),
        processing_class=tokenizer,
        callbacks=[Clock()],
    )
    trainer.train()
    counted = times[1:]
    return sum(counted), int(sum(tokens[1 : len(times)])), len(counted)


def run_ragen(model_dir: Path, args, run_dir: Path) -> tuple[float, int, int]:
    """(seconds, generated tokens, steps) of ragen's counted steps."""
    from ragen.trainer.config import load_config
    from ragen.trainer.starpo import StarPOTrainer

    batch = args.prompts * args.group_size
    cfg = load_config(
        [
            f"env={args.env}",
            "algo=grpo",
            "model=tiny",
            f"model.path={model_dir}",
            f"model.device={args.device}",
            f"model.actor_lr={args.lr}",
            f"model.engine={args.engine}",
            f"rollout.env_groups={args.prompts}",
            f"rollout.group_size={args.group_size}",
            f"rollout.max_new_tokens={args.max_new_tokens}",
            "rollout.temperature=1.0",
            "algo.kl_coef=0",
            f"algo.ppo_mini_batch_size={batch}",
            "algo.ppo_epochs=1",
            f"trainer.total_steps={args.steps + 1}",
            f"trainer.seed={args.seed}",
            "trainer.val_every=0",
            "trainer.save_every=0",
            "trainer.console=false",
            "trainer.save_trajectories=false",
            "trainer.tensorboard=false",
            "trainer.reasoning_samples=0",
            f"trainer.run_dir={run_dir}",
        ]
    )
    trainer = StarPOTrainer(cfg)
    times: list[float] = []
    tokens: list[int] = []
    for step in range(args.steps + 1):
        before = trainer.engine.stats.generated_tokens
        tic = time.perf_counter()
        trainer.train_step(step)
        times.append(time.perf_counter() - tic)
        tokens.append(trainer.engine.stats.generated_tokens - before)
    return sum(times[1:]), sum(tokens[1:]), len(times) - 1


def model_folder(args, tmp: Path) -> Path:
    """The HF folder both trainers load: ``--model`` (a ``.gguf`` converted once, through
    ragen's cache) or a fresh tiny model in ``tmp``."""
    if not args.model:
        from ragen.models.tiny import create_tiny

        return create_tiny(tmp / "model", size=args.size, seed=args.seed)
    from ragen.models.gguf import convert_gguf
    from ragen.models.names import resolve_model

    source = resolve_model(args.model)
    return convert_gguf(source) if str(source).endswith(".gguf") else Path(source)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="bandit")
    p.add_argument("--size", default="nano", help="tiny preset")
    p.add_argument("--model", default=None, help="a folder, .gguf or preset (default: tiny)")
    p.add_argument("--prompts", type=int, default=8, help="initial states per step")
    p.add_argument("--group-size", type=int, default=8, help="samples per state (GRPO group)")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--steps", type=int, default=5, help="counted steps (after one warm-up)")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--engine", default="static", help="ragen's engine: eager|static|compiled")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=2, help="pairs of runs, alternating order")
    args = p.parse_args(argv)
    try:
        import trl  # noqa: F401
    except ImportError:
        print(
            "bench_vs_trl skipped: it needs TRL, a bench-only dependency: "
            "pip install -c constraints.txt trl  (or pip install -e '.[bench]')"
        )
        return
    import torch

    from ragen.models.tiny import build_tokenizer

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = model_folder(args, Path(tmp))
        data = capture_prompts(args.env, args.prompts * 4, args.seed, build_tokenizer("chatml"))
        totals = {"ragen": [0.0, 0, 0], "TRL": [0.0, 0, 0]}
        for round_ in range(args.rounds):
            order = ("ragen", "TRL") if round_ % 2 == 0 else ("TRL", "ragen")
            for name in order:
                if name == "ragen":
                    got = run_ragen(model_dir, args, Path(tmp) / f"ragen{round_}")
                else:
                    got = run_trl(model_dir, data, args, Path(tmp) / f"trl{round_}")
                totals[name] = [a + b for a, b in zip(totals[name], got)]
                print(f"round {round_ + 1} {name}: {got[2]} steps in {got[0]:.2f}s", flush=True)
        ours, theirs = totals["ragen"], totals["TRL"]
    import trl

    print(
        f"GRPO on {args.env}, {args.model or 'tiny:' + args.size}, {args.prompts} prompts x {args.group_size} "
        f"samples per step, <= {args.max_new_tokens} new tokens, device={args.device}, "
        f"torch threads {torch.get_num_threads()}, TRL {trl.__version__}, ragen engine "
        f"{args.engine}; {args.rounds} rounds x {args.steps} counted steps after one warm-up "
        "step each"
    )
    head = f"{'trainer':<12} {'steps':>5} {'seconds':>8} {'steps/s':>8} {'gen tokens':>10} {'tok/s':>8}"
    print(head)
    print("-" * len(head))
    for name, (sec, tok, steps) in (("ragen", ours), ("TRL", theirs)):
        print(f"{name:<12} {steps:>5} {sec:>8.2f} {steps / sec:>8.3f} {tok:>10} {tok / sec:>8.1f}")
    ratio_steps = (ours[2] / ours[0]) / (theirs[2] / theirs[0])
    ratio_tokens = (ours[1] / ours[0]) / (theirs[1] / theirs[0]) if theirs[1] else float("nan")
    print(f"ratio ragen / TRL: steps/s {ratio_steps:.2f}, tokens/s {ratio_tokens:.2f}")


if __name__ == "__main__":
    main()

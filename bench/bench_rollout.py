"""Throughput of the multi-turn rollout loop against bare ``model.generate`` calls.

Run from the repository root::

    .venv/bin/python -m bench.bench_rollout                      # tiny "small", 8x16, 5 turns
    .venv/bin/python -m bench.bench_rollout --size nano --max-new-tokens 32 --threads 2

Workload: a randomly initialized tiny model (``ragen.models.tiny``, built in memory)
plays ``--groups x --group-size`` Sokoban episodes for up to ``--turns`` turns with
``--max-new-tokens`` per turn (temperature 1). A random model rarely closes its answer,
so nearly every turn runs to the token limit and every episode lasts all turns: the
loop does the full amount of generation.

Baseline, paired turn by turn: right after the rollout's generation call of turn t,
ONE bare ``model.generate`` call (sampling, KV cache, no stop strings) runs with the
same number of sequences, prompts of that turn's mean prompt length (a Sokoban prompt
tiled to length; identical lengths, so no padding) and the same ``max_new_tokens``.
Pairing keeps both measurements close in time, which matters on a shared machine.
Bare tokens are counted up to and including each row's first EOS. A pretrained model
stops early on that tiled prompt while its real replies run long, so the token ratio
misleads there; the ``decode step`` line compares the time per decode step at the same
batch instead (the baseline's prefill included, so its ratio is a floor).

Rows: ``rollout (whole loop)`` = ``run_rollout`` wall time minus the bare calls made
inside it (chat template, token context, batched ``HFEngine.generate``, parsing, env
steps, samples); ``engine share`` = time inside ``HFEngine.generate``; ``bare generate``
= the paired baseline calls. tokens/s = generated tokens / seconds; the ratio is
loop tokens/s over bare tokens/s.

Engines side by side (``--engines before,eager,static``, or ``compiled``, or the
``bench.bench_generate.VARIANTS`` ``static-modules`` / ``static-nokernel``): the same
rollout (same seeds, so the same episodes when the engines sample the same ids) runs
once per engine in this process, and a second table gives each engine's loop tokens/s,
its decode ms per step and the ratio to the first engine. ``before`` is ``HFEngine``
with the ``torch.multinomial`` draw it had before the static step
(``bench.bench_generate.before_engine``). The bare baseline runs with the first engine
only (``--no-bare`` skips it: it is the slow part). On a shared machine the load drifts
from one rollout to the next: ``--repeats 2`` runs the engines twice, in alternating
order, and keeps each engine's fastest rollout::

    .venv/bin/python -m bench.bench_rollout --size nano --max-new-tokens 48 --threads 2 \
        --engines before,static --no-bare --repeats 2

The demo's own rollouts are another workload: short replies from a trained policy,
compact prompts, one state per turn (so no history to reuse, but a shared system
prompt): ``--model runs/demo/sokoban/sft --demo --env sokoban --groups 16
--group-size 4`` (``--demo`` takes the demo's prompt shape and budgets for ``--env``).
"""

from __future__ import annotations

import argparse
import time


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="rollout loop vs bare model.generate throughput")
    p.add_argument("--size", default="small", help="tiny model preset: nano|micro|small|base")
    p.add_argument("--env", default="sokoban")
    p.add_argument("--groups", type=int, default=8)
    p.add_argument("--group-size", type=int, default=16)
    p.add_argument("--turns", type=int, default=5)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--engines",
        default="static",
        help="comma-separated of before,eager,static,compiled,static-bf16 (or a bench_generate "
        "variant: static-modules, static-nokernel): one rollout each",
    )
    p.add_argument("--no-bare", action="store_true", help="skip the bare model.generate pairing")
    p.add_argument(
        "--model",
        default=None,
        help="a saved policy folder (e.g. a demo warm start) instead of the random tiny model",
    )
    p.add_argument(
        "--demo",
        action="store_true",
        help="the demo's rollout shape for --env (compact prompts, one state per turn, its "
        "turn and token budgets) instead of --turns / --max-new-tokens with full history",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="rollouts per engine, alternating the engine order; the fastest counts",
    )
    args = p.parse_args(argv)

    import torch

    from bench.bench_generate import bench_engine
    from ragen.agent.env_manager import EnvStateManager
    from ragen.agent.policies import ModelPolicy
    from ragen.agent.rollout import RolloutConfig, run_rollout
    from ragen.models.tiny import build_model, build_tokenizer

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.model:
        from ragen.models import load_policy

        model, tok = load_policy(args.model)
        model = model.to(args.device).eval()
    else:
        tok = build_tokenizer("chatml")
        model = build_model(args.size, tok, seed=args.seed).to(args.device).eval()
    n_params = sum(p.numel() for p in model.parameters())
    names = args.engines.split(",")
    engines = {name: bench_engine(model, tok, name) for name in names}
    for engine in engines.values():
        engine.prefix_cache = True  # before_engine turns it off for the one-call bench
    hf = engines[names[0]]
    eos = set(hf.eos_token_ids)
    probe = EnvStateManager(args.env, env_groups=1, group_size=1, seed=args.seed)
    probe.reset([0])
    base = tok.apply_chat_template(
        [{"role": "user", "content": probe.envs[0].render("text")}], add_generation_prompt=True
    )
    base = list(base["input_ids"] if hasattr(base, "keys") else base)

    def bare_generate(n_seqs: int, length: int, max_new: int) -> tuple[int, float, int]:
        """One ``model.generate`` over ``n_seqs`` prompts of ``length`` ids: (tokens up to
        each row's first EOS, seconds, decode steps run; HF runs until every row is done)."""
        prompt = (base * (length // len(base) + 1))[-length:]
        input_ids = torch.tensor([prompt] * n_seqs, device=args.device)
        with torch.no_grad():
            tic = time.perf_counter()
            out = model.generate(
                input_ids,
                attention_mask=torch.ones_like(input_ids),
                do_sample=True,
                temperature=1.0,
                top_p=1.0,
                top_k=0,
                max_new_tokens=max_new,
                pad_token_id=tok.pad_token_id,
            )
            seconds = time.perf_counter() - tic
        tokens = sum(
            next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
            for row in out[:, length:].tolist()
        )
        return tokens, seconds, out.shape[1] - length

    class PairedEngine:
        """The rollout's engine; after each call, runs the matching bare baseline."""

        eos_token_ids = hf.eos_token_ids
        max_positions = hf.max_positions

        def __init__(self, inner, paired: bool) -> None:
            self.inner, self.paired = inner, paired
            # (rows, mean prompt, bare tokens, bare s, engine s, bare decode steps)
            self.calls: list[tuple[int, int, int, float, float, int]] = []

        def generate(self, prompts, params):
            tic = time.perf_counter()
            gens = self.inner.generate(prompts, params)
            engine_s = time.perf_counter() - tic
            mean_len = round(sum(map(len, prompts)) / len(prompts))
            n, sec, steps = 0, 0.0, 0
            if self.paired:
                n, sec, steps = bare_generate(len(prompts), mean_len, params.max_new_tokens)
            self.calls.append((len(prompts), mean_len, n, sec, engine_s, steps))
            return gens

    cfg = RolloutConfig(
        max_turns=args.turns, max_new_tokens=args.max_new_tokens, temperature=1.0, seed=args.seed
    )
    env_config: dict = {}
    if args.demo:
        import dataclasses

        from ragen.recipes import BUDGETS, ENV_SHAPE

        budget = BUDGETS["classic"]
        shape = ENV_SHAPE[args.env].rollout(budget, args.env)
        cfg = dataclasses.replace(shape, temperature=1.0, seed=args.seed)
        env_config = budget.env_config(args.env)
    bare_generate(2, 16, 4)
    results = {}
    schedule = [
        (name, r == 0 and name == names[0] and not args.no_bare)
        for r in range(args.repeats)
        for name in (names if r % 2 == 0 else names[::-1])
    ]

    def rollout_once(name: str, pair: bool) -> None:
        """One rollout with engine ``name``; keeps its fastest in ``results``."""
        inner = engines[name]
        engine = PairedEngine(inner, paired=pair)
        policy = ModelPolicy(engine, tok)
        # warm-up (allocator, kernels, template compilation, a compile) on a small batch
        paired, engine.paired = engine.paired, False
        warm = EnvStateManager(args.env, env_groups=1, group_size=2, seed=args.seed)
        tic = time.perf_counter()
        run_rollout(policy, warm, RolloutConfig(max_turns=1, max_new_tokens=4), [0])
        warm_s = time.perf_counter() - tic
        engine.paired, engine.calls = paired, []
        inner.clear_prefix_cache()
        inner.reset_stats()
        manager = EnvStateManager(
            args.env,
            env_groups=args.groups,
            group_size=args.group_size,
            seed=args.seed,
            env_config=env_config,
        )
        tic = time.perf_counter()
        result = run_rollout(policy, manager, cfg, manager.seeds_for_step(0))
        wall = time.perf_counter() - tic
        loop = wall - sum(c[3] for c in engine.calls)
        if name not in results or loop < results[name][2] - sum(
            c[3] for c in results[name][0].calls
        ):
            results[name] = (engine, result, wall, warm_s, inner.stats.as_dict())

    failed: dict[str, str] = {}
    for name, pair in schedule:
        if name in failed:
            continue
        try:
            rollout_once(name, pair)
        except Exception as err:  # one engine failing (a CUDA-graph capture, say) spares the rest
            failed[name] = f"{type(err).__name__}: {err}"
            print(f"engine {name} failed and is left out: {failed[name]}")
    if names[0] in failed:
        raise SystemExit(f"the first engine ({names[0]}) failed: {failed[names[0]]}")

    print(
        f"{args.model or 'tiny-' + args.size} ({n_params / 1e6:.2f}M params), {args.env}, "
        f"device={args.device}, threads={torch.get_num_threads()}, "
        f"{args.groups}x{args.group_size} sequences, <= {cfg.max_turns} turns, "
        f"max_new_tokens={cfg.max_new_tokens}{', demo prompts' if args.demo else ''}"
    )
    engine, result, wall, _, _ = results[names[0]]
    bare_tokens = sum(c[2] for c in engine.calls)
    bare_s = sum(c[3] for c in engine.calls)
    engine_s = sum(c[4] for c in engine.calls)
    loop_s = wall - bare_s  # the rollout without the baseline calls made inside it
    gen_tokens = int(result.stats["generated_tokens"])
    if bare_s > 0:
        header = f"{'setting':<22} {'calls':>5} {'tokens':>8} {'seconds':>8} {'tok/s':>9}"
        print(f"engine {names[0]}")
        print(header)
        print("-" * len(header))
        prompts = "/".join(str(c[1]) for c in engine.calls)
        rows = [
            ("rollout (whole loop)", len(engine.calls), gen_tokens, loop_s),
            ("  engine share", len(engine.calls), gen_tokens, engine_s),
            ("bare model.generate", len(engine.calls), bare_tokens, bare_s),
        ]
        for label, calls, n, sec in rows:
            print(f"{label:<22} {calls:>5} {n:>8} {sec:>8.2f} {n / sec:>9.1f}")
        batches = "/".join(str(c[0]) for c in engine.calls)
        print(f"batch per call: {batches}; mean prompt: {prompts}")
        ratio = (gen_tokens / loop_s) / (bare_tokens / bare_s)
        print(
            f"ratio rollout loop / bare generate: {ratio:.2f}  "
            f"(engine only: {(gen_tokens / engine_s) / (bare_tokens / bare_s):.2f}; "
            f"loop overhead outside the engine: {100 * (1 - engine_s / loop_s):.1f}% of loop time)"
        )
        # Token counts favour whichever side generates longer replies (a pretrained model
        # stops early on the tiled baseline prompt); the time per decode step at the same
        # batch does not. The baseline's includes its prefill, so the ratio is a floor.
        st = results[names[0]][4]
        loop_step = (st["seconds"] - st["prefill_seconds"]) / max(1, st["decode_steps"])
        bare_step = bare_s / max(1, sum(c[5] for c in engine.calls))
        print(
            f"decode step: engine {loop_step * 1e3:.2f} ms, bare generate "
            f"{bare_step * 1e3:.2f} ms (prefill included); ratio {bare_step / loop_step:.2f}x"
        )
    if len(results) > 1 or bare_s == 0:
        head = (
            f"{'engine':<13} {'warm-up s':>9} {'loop s':>7} {'tokens':>7} {'tok/s':>8} "
            f"{'prefill s':>9} {'ms/step':>8} {'vs first':>8}"
        )
        print(head)
        print("-" * len(head))
        first = None
        for name, (engine, result, wall, warm_s, st) in results.items():
            loop = wall - sum(c[3] for c in engine.calls)
            tokens = int(result.stats["generated_tokens"])
            step = (st["seconds"] - st["prefill_seconds"]) / max(1, st["decode_steps"])
            first = first or tokens / loop
            print(
                f"{name:<13} {warm_s:>9.2f} {loop:>7.2f} {tokens:>7} {tokens / loop:>8.1f} "
                f"{st['prefill_seconds']:>9.2f} {step * 1e3:>8.2f} {tokens / loop / first:>7.2f}x"
            )


if __name__ == "__main__":
    main()

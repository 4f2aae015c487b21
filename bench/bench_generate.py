"""Tokens/s of ``HFEngine.generate`` vs a bare ``model.generate`` on the same batch.

    .venv/bin/python -m bench.bench_generate                          # all scenarios
    .venv/bin/python -m bench.bench_generate --scenarios no-stop --repeats 1   # quicker

Tiny random ``small`` model (~8M parameters), temperature 1.0, ONE torch thread. Each
method runs ``--repeats`` times, interleaved, and the best run counts. Wall seconds and
the process's CPU seconds are both reported; on a shared machine the CPU seconds of a
single-threaded run are the steadier measure, so tok/s and the ratio use them.

Scenarios:

* ``no-stop``: 128 prompts of 180-220 tokens, 64 new tokens, no stop strings.
* ``early-stop``: the same with a logit bias on EOS (both methods see it), so rows
  finish at different steps as agent turns do when they close ``</answer>``.
* ``multi-turn``: ``batch/2`` (64) episodes x 5 turns: each turn's prompt is the
  previous prompt + the sampled ids + a 40-token "observation" (the token-exact
  context of a rollout), ``3/4 * new`` (48) new tokens per turn, from 250-token prompts.

Methods:

* ``model.generate``: transformers' sampler (sampling, KV cache, same prompts);
* ``HFEngine``: our loop (preallocated KV cache, finished rows dropped, log-probs,
  prefix reuse across calls);
* ``HFEngine-noprefix``: the same without prefix reuse (matters in multi-turn only);
* ``HFEngine+DynamicCache``: our loop with transformers' concatenating cache, to show
  what the preallocated cache buys.

Generated tokens are counted up to and including EOS for every method.
"""

from __future__ import annotations

import argparse
import random
import time


def _prompts(vocab_low: int, vocab_high: int, batch: int, length: int, seed: int):
    rng = random.Random(seed)
    spread = max(1, length // 10)
    return [
        [
            rng.randrange(vocab_low, vocab_high)
            for _ in range(rng.randint(length - spread, length + spread))
        ]
        for _ in range(batch)
    ]


def _until_eos(row: list[int], eos_ids: set[int]) -> list[int]:
    for i, tok in enumerate(row):
        if tok in eos_ids:
            return row[: i + 1]
    return row


def hf_generate(model, pad_id: int, prompts, new_tokens: int, eos_ids: set[int], seed: int):
    """Bare ``model.generate`` on left-padded prompts; returns the sampled id lists."""
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=new_tokens,
            eos_token_id=sorted(eos_ids),
            pad_token_id=pad_id,
        )
    return [_until_eos(row, eos_ids) for row in out[:, width:].tolist()]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="small")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--prompt-len", type=int, default=200)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--eos-bias", type=float, default=4.0, help="logit bias, early-stop")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0 = torch default)")
    parser.add_argument(
        "--scenarios", default="no-stop,early-stop,multi-turn", help="comma-separated subset"
    )
    args = parser.parse_args(argv)

    import torch

    import ragen.engines.hf as hf
    from ragen.engines.base import SamplingParams
    from ragen.models.tiny import build_model, build_tokenizer

    if args.threads:
        torch.set_num_threads(args.threads)
    tokenizer = build_tokenizer("chatml")
    model = build_model(args.size, tokenizer, seed=0)
    n_params = sum(p.numel() for p in model.parameters())
    vocab = (10, len(tokenizer) - 10)
    engines = {
        "HFEngine": hf.HFEngine(model, tokenizer),
        "HFEngine-noprefix": hf.HFEngine(model, tokenizer, prefix_cache=False),
    }
    eos_ids = set(engines["HFEngine"].eos_token_ids)
    pad_id = tokenizer.pad_token_id
    original_cache = hf.make_kv_cache

    def method(name: str):
        """``fn(prompts, new_tokens) -> list of sampled id lists`` for method ``name``."""
        if name == "model.generate":
            return lambda prompts, new: hf_generate(model, pad_id, prompts, new, eos_ids, 0)

        def run(prompts, new):
            params = SamplingParams(temperature=1.0, max_new_tokens=new, stop_strings=[], seed=0)
            if name == "HFEngine+DynamicCache":
                from transformers import DynamicCache

                hf.make_kv_cache = lambda m, capacity: DynamicCache(config=m.config)
            try:
                engine = engines.get(name, engines["HFEngine-noprefix"])
                return [g.token_ids for g in engine.generate(prompts, params)]
            finally:
                hf.make_kv_cache = original_cache

        return run

    def single_call(fn, prompts, new):
        return sum(len(r) for r in fn(prompts, new))

    def multi_turn(fn, turns=5, batch=64, prompt_len=250, new=48, obs_len=40):
        for engine in engines.values():
            engine.clear_prefix_cache()
        prompts = _prompts(*vocab, batch, prompt_len, seed=1)
        rng = random.Random(2)
        total = 0
        for _ in range(turns):
            outs = fn(prompts, new)
            total += sum(len(r) for r in outs)
            prompts = [
                p + r + [rng.randrange(*vocab) for _ in range(obs_len)]
                for p, r in zip(prompts, outs)
            ]
        return total

    scenarios = {
        "no-stop": ["model.generate", "HFEngine", "HFEngine+DynamicCache"],
        "early-stop": ["model.generate", "HFEngine"],
        "multi-turn": ["model.generate", "HFEngine", "HFEngine-noprefix"],
    }
    prompts = _prompts(*vocab, args.batch, args.prompt_len, seed=0)
    rows = []
    for scenario in args.scenarios.split(","):
        names = scenarios[scenario]
        hook = None
        if scenario == "early-stop":
            bias = torch.zeros(len(tokenizer))
            bias[tokenizer.eos_token_id] = args.eos_bias
            hook = model.lm_head.register_forward_hook(lambda mod, inp, out, b=bias: out + b)
        best: dict[str, tuple[float, float, int]] = {}  # name -> (cpu s, wall s, tokens)
        for _ in range(args.repeats):
            for name in names:
                wall, cpu = time.perf_counter(), time.process_time()
                if scenario == "multi-turn":
                    tokens = multi_turn(
                        method(name), batch=max(1, args.batch // 2), new=max(1, args.new * 3 // 4)
                    )
                else:
                    tokens = single_call(method(name), prompts, args.new)
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                if name not in best or cpu < best[name][0]:
                    best[name] = (cpu, wall, tokens)
        if hook is not None:
            hook.remove()
        base = best["model.generate"][2] / best["model.generate"][0]
        for name in names:
            cpu, wall, tokens = best[name]
            rows.append((scenario, name, tokens, wall, cpu, tokens / cpu, tokens / cpu / base))

    print(
        f"model: tiny {args.size} ({n_params / 1e6:.2f}M params); single-call scenarios: batch "
        f"{args.batch}, prompt ~{args.prompt_len} tokens, {args.new} new tokens; "
        f"torch threads {torch.get_num_threads()}; best of {args.repeats}"
    )
    print(
        f"{'scenario':<11} {'method':<22} {'tokens':>7} {'wall s':>7} {'cpu s':>7} "
        f"{'tok/cpu-s':>9} {'ratio':>6}"
    )
    for scenario, name, tokens, wall, cpu, tps, ratio in rows:
        print(
            f"{scenario:<11} {name:<22} {tokens:>7} {wall:>7.2f} {cpu:>7.2f} {tps:>9.1f} {ratio:>6.2f}"
        )


if __name__ == "__main__":
    main()

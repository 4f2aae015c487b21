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

Decode step, engine against engine (``--engines``, default ``before,eager,static``; add
``compiled`` for ``torch.compile``, or the :data:`VARIANTS` ``static-modules`` (the
static engine with transformers' forward and the matmul attention, the default before
the direct step), ``static-nokernel`` (the direct step without the C attention) and
``static-hfprefill`` (the direct decode step with transformers' prefill, the default
before the direct prefill), ``static-noshare`` (no shared-prefix prefill),
``static-oldprefill`` (neither: the default decode step with the prefill it had before);
``static-bf16`` is the opt-in engine with bf16 matmuls, NOT exact, so the id column
shows how many rows it drew differently)): ONE call of ``--batch`` prompts x ``--new`` tokens
without stop strings per engine, repeated and interleaved, best run. It prints the
prefill and the per-step decode time (``GenerationStats.prefill_seconds`` /
``decode_steps``, in CPU seconds of the process), the ratio to ``before`` (``HFEngine`` as it was before
the static step: the same loop with a ``torch.multinomial`` draw), whether each engine
sampled exactly the ids of ``eager`` (max |log-prob difference| beside), and the share
of the step's roofline: ``max(FLOPs / peak FLOP/s, bytes / peak bytes/s)`` with the
FLOPs and bytes of one step (``2 * rows * (params)`` + attention ``4 * rows * layers *
H * D * L``; weights + K/V read once) and the peaks measured here (one large fp32
matmul, one large sum)::

    .venv/bin/python -m bench.bench_generate --size nano --scenarios none --engines before,eager,static,compiled
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


def before_engine(model, tokenizer):
    """``HFEngine`` as it was before the static step: its draw was ``torch.multinomial``
    and it decoded every running row's tail for stop strings every step."""
    from ragen.engines.hf import HFEngine, truncate_logprobs

    class BeforeEngine(HFEngine):
        prefilter_stops = False  # it decoded every running row's tail every step

        def _sample(self, logits, params, generator):
            import torch

            t = params.temperature
            logp = torch.log_softmax(logits.float() / (t if t > 0 else 1.0), dim=-1)
            if t == 0:
                ids = logp.argmax(dim=-1)
            else:
                probs = truncate_logprobs(logp, params.top_p, params.top_k).softmax(dim=-1)
                ids = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
            return ids, logp.gather(-1, ids.unsqueeze(-1)).squeeze(-1)

    return BeforeEngine(model, tokenizer, prefix_cache=False, share_prefix=False)


#: bench-only engine variants beside ``make_hf_engine``'s names: the static step as it
#: was before the direct step (transformers' forward, batched-matmul attention), and the
#: direct step without the C attention kernel
VARIANTS = {
    "static-modules": {"direct": False},
    "static-nokernel": {"attention_kernel": False},
    "static-bf16mm": {"bf16_matmuls": True},
    "static-bf16kv": {"bf16_kv": True},
    "static-hfprefill": {"direct_prefill": False},
    "static-noshare": {"share_prefix": False},
    "static-oldprefill": {"direct_prefill": False, "share_prefix": False},
}


def bench_engine(model, tokenizer, name: str, **kwargs):
    """The engine called ``name``: ``before``, a :data:`VARIANTS` key, or a
    ``model.engine`` choice (eager, static, compiled)."""
    from ragen.engines.compiled import StaticHFEngine, make_hf_engine

    if name == "before":
        return before_engine(model, tokenizer)
    if name in VARIANTS:
        return StaticHFEngine(model, tokenizer, **VARIANTS[name], **kwargs)
    return make_hf_engine(model, tokenizer, name, **kwargs)


def machine_peaks() -> tuple[float, float]:
    """(fp32 FLOP/s of one 1024^3 matmul, bytes/s of summing 256 MB) per CPU second of
    this process (its threads' peak; memory bandwidth is shared with other jobs)."""
    import torch

    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    big = torch.randn(64 * 1024 * 1024)
    flops, bw = 0.0, 0.0
    for _ in range(5):  # CPU seconds, best of 5: other jobs on the machine inflate wall time
        tic = time.process_time()
        a @ b
        flops = max(flops, 2 * 1024**3 / (time.process_time() - tic))
        tic = time.process_time()
        big.sum()
        bw = max(bw, big.numel() * 4 / (time.process_time() - tic))
    return flops, bw


def step_cost(model, rows: int, context: int) -> tuple[float, float]:
    """(FLOPs, bytes) of one decode step: ``rows`` new tokens over ``context`` positions."""
    cfg = model.config
    params = sum(p.numel() for p in model.parameters())
    embed = model.get_input_embeddings().weight.numel()
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    matmul_params = (
        params - embed + (embed if tied else 0)
    )  # the lm_head multiplies, lookup does not
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    layers, kv_heads = cfg.num_hidden_layers, cfg.num_key_value_heads
    attention = 4 * rows * layers * cfg.num_attention_heads * head_dim * context
    flops = 2 * rows * matmul_params + attention
    kv_bytes = 2 * rows * layers * kv_heads * head_dim * context * 4
    return flops, params * 4 + kv_bytes


def compare_ids(reference, other) -> str:
    """``rows with identical ids / rows`` and the max |log-prob difference| over the ids
    the two agree on (up to each row's first difference); a draw whose uniform lands
    within float rounding of a CDF boundary can differ between kernels."""
    equal, diff, first = 0, 0.0, []
    for a, b in zip(reference, other):
        n = next((i for i, (x, y) in enumerate(zip(a.token_ids, b.token_ids)) if x != y), None)
        agree = len(a.token_ids) if n is None else n
        diff = max([diff, *(abs(x - y) for x, y in zip(a.logprobs[:agree], b.logprobs[:agree]))])
        if n is None and a.token_ids == b.token_ids:
            equal += 1
        elif n is not None:
            first.append(n)
    where = f", first difference at step {min(first)}" if first else ""
    return f"{equal}/{len(reference)} rows ({diff:.1e}{where})"


def decode_table(model, tokenizer, prompts, new: int, repeats: int, names: list[str]) -> None:
    """Per-step decode time of each engine on one call; see the module doc."""
    import torch

    from ragen.engines.base import SamplingParams

    engines = {name: bench_engine(model, tokenizer, name, prefix_cache=False) for name in names}
    params = SamplingParams(temperature=1.0, max_new_tokens=new, stop_strings=[], seed=0)
    # The engines' stats in CPU seconds of this process (steadier than wall time on a
    # shared machine; equal to it on an idle one with one thread).
    import types

    import ragen.engines.hf as hf_module

    hf_module.time = types.SimpleNamespace(perf_counter=time.process_time)
    warm = {}
    for name, engine in engines.items():  # compile (if any) and allocator warm-up
        tic = time.perf_counter()  # wall: inductor compiles in worker processes
        engine.generate(prompts[:8], SamplingParams(max_new_tokens=4, seed=0))
        warm[name] = time.perf_counter() - tic
    best: dict[str, tuple[float, float]] = {}
    outputs = {}
    for _ in range(repeats):
        for name, engine in engines.items():
            engine.reset_stats()
            outputs[name] = engine.generate(prompts, params)
            st = engine.stats
            step = (st.seconds - st.prefill_seconds) / max(1, st.decode_steps)
            if name not in best or step < best[name][1]:
                best[name] = (st.prefill_seconds, step)
    peak_flops, peak_bw = machine_peaks()
    context = sum(map(len, prompts)) / len(prompts) + new / 2  # mean K/V length of a step
    flops, nbytes = step_cost(model, len(prompts), round(context))
    roofline = max(flops / peak_flops, nbytes / peak_bw)
    print(
        f"decode step: {len(prompts)} rows, {new} new tokens, mean context {context:.0f}; "
        f"torch threads {torch.get_num_threads()}; best of {repeats}; step = "
        f"{flops / 1e6:.0f} MFLOP + {nbytes / 1e6:.0f} MB; peaks here {peak_flops / 1e9:.0f} "
        f"GFLOP/s, {peak_bw / 1e9:.0f} GB/s -> roofline {roofline * 1e3:.2f} ms"
    )
    print(
        f"{'engine':<15} {'warm-up s':>9} {'prefill s':>9} {'ms/step':>8} {'vs before':>9} "
        f"{'roofline':>8}  same ids as eager (max |dlogp| where equal)"
    )
    reference = outputs.get("eager")
    base = best.get("before", best[names[0]])[1]
    for name in names:
        prefill, step = best[name]
        same = ""
        if name == "before":
            same = "n/a (multinomial draw)"
        elif reference is not None:
            same = compare_ids(reference, outputs[name])
        print(
            f"{name:<15} {warm[name]:>9.2f} {prefill:>9.2f} {step * 1e3:>8.2f} "
            f"{base / step:>8.2f}x {100 * roofline / step:>7.0f}%  {same}"
        )


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
        "--scenarios",
        default="no-stop,early-stop,multi-turn",
        help="comma-separated subset ('none': only the decode-step table)",
    )
    parser.add_argument(
        "--engines",
        default="before,eager,static",
        help="decode-step table: comma-separated of before,eager,static,compiled,static-bf16 "
        "and the "
        "bench variants static-modules,static-nokernel ('' = skip)",
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

                hf.make_kv_cache = lambda m, *args: DynamicCache(config=m.config)
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
    if args.engines:
        decode_table(model, tokenizer, prompts, args.new, args.repeats, args.engines.split(","))
    rows = []
    for scenario in [s for s in args.scenarios.split(",") if s != "none"]:
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

    if not rows:
        return
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

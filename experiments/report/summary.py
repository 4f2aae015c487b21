"""docs/RESULTS.md's summary table and the short figure sentences of the README.

:data:`CLAIMS` is every claim the summary states, each with the function that reads its
figure from the results files and the files it reads (their provenance gives the
command, device, commit and date columns). A claim whose results file is gone is not
here: it was withdrawn to the notebook (docs/notebook/2026-11-28-report-rebuild.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from experiments.report import demo, findings, grids, sources
from experiments.report.gains import difference, pct
from experiments.report.verdicts import finding_verdict

G = grids.path
F = findings.path


def _g(stem: str, env: str, variant: str, warm_from: str | None = None, method: bool = True) -> str:
    return grids.gain(stem, env, variant, warm_from).text(method)


def _warm(stem: str, env: str) -> list[float]:
    d = grids.data(stem)
    return [
        d[env][s]["warm"]["success_rate"] for s in sorted(d[env], key=int) if "warm" in d[env][s]
    ]


def _per_seed(stem: str, env: str) -> str:
    return " / ".join(f"{100 * x:.1f}" for x in _warm(stem, env)) + "%"


# -- figures ------------------------------------------------------------------------------
def _demo_gains(relpath: str) -> str:
    data = sources.load(relpath)
    cells = []
    for env in demo.ENVS:
        g = demo.gains(data, env)
        if g is not None:
            cells.append(f"{demo.LABELS[env]} {g.text()}, beyond noise on {g.seeds_text()} seeds")
    return "; ".join(cells)


def demo_figure() -> str:
    files = sources.demo_seed_files()
    if not files:
        return "not measured yet: no `experiments/demo_seeds/results/*.json`"
    return _demo_gains(files[0])


def demo_variants_figure() -> str:
    """The demo's other configurations (another float rounding, ...), each by its label."""
    files = sources.demo_seed_files()[1:]
    if not files:
        return "not measured yet: only `default.json` in `experiments/demo_seeds/results/`"
    return " | ".join(f"`{Path(f).stem}`: {_demo_gains(f)}" for f in files)


def _variant_seeds() -> str:
    """The seeds of each of the demo's other configurations, by its label."""
    return (
        "; ".join(
            f"{', '.join(map(str, sources.load(f).get('seeds', [])))} (`{Path(f).stem}`)"
            for f in sources.demo_seed_files()[1:]
        )
        or "-"
    )


def finding_figure(key: str) -> str:
    f = findings.BY_KEY[key]
    parts = f.parts()
    shown = [
        f"{p.measure}: {p.interval.format()} {p.unit}" for p in parts if p.interval is not None
    ]
    shown = shown or [p.why for p in parts[:1]]
    return f"**{finding_verdict(parts)}** (FINDINGS' rule); " + "; ".join(shown)


def aux_figure() -> str:
    return (f"warm starts with it: FrozenLake {_per_seed('tiny-cpu-aux', 'frozen_lake')}, Sokoban "
            f"{_per_seed('tiny-cpu-aux', 'sokoban')} (seeds 0 / 1 / 2); without it (lr 1e-3): "
            f"FrozenLake {_per_seed('tiny-cpu-warm', 'frozen_lake')}, Sokoban "
            f"{_per_seed('tiny-cpu-warm', 'sokoban')}")  # fmt: skip


def dapo_figure(stem: str) -> str:
    g = grids.gain(stem, "sokoban", "dapo80" if stem.endswith("80") else "dapo", "tiny-cpu-aux")
    return f"{g.text()}; beyond noise on {g.seeds_text()} seeds"


FL_SMALL = [("tiny-cpu-aux", v) for v in ("all", "dapo", "top25", "all256")] + [
    ("tiny-cpu-aux-fl-g8", "dapo-g8"), ("tiny-cpu-aux-fl-g8", "drgrpo-g8"),
    ("tiny-cpu-aux-fl-critic", "all-c3"), ("tiny-cpu-aux-fl-critic", "dapo-c3"),
    ("tiny-cpu-aux-fl-proc", "proc"), ("tiny-cpu-aux-fl-t05", "dapo-g8-t05"),
    ("tiny-cpu-aux-fl-t05-80", "dapo-g8-t05-80"), ("tiny-cpu-aux-fl-vcrit", "dapo-g8-vc"),
]  # fmt: skip


def small_batches_figure() -> str:
    gains = {v: grids.gain(stem, "frozen_lake", v) for stem, v in FL_SMALL}
    means = [g.mean for g in gains.values()]
    above = [v for v, g in gains.items() if g.interval.low > 0]
    below = [f"`{v}` {g.interval.format()}" for v, g in gains.items() if g.interval.high < 0]
    return (f"{len(gains)} variants, mean gains {min(means):+.1f} to {max(means):+.1f} points; "
            f"intervals above 0: {len(above)}; below 0: {', '.join(below) or 'none'} (seed t, 3 seeds each)")  # fmt: skip


def x16_figure() -> str:
    g = grids.gain("tiny-cpu-aux-fl-x16-state", "frozen_lake", "x16-lr3e-4-60")
    seeds = ", ".join(f"s{s.seed} {100 * s.before:.1f} -> {100 * s.after:.1f}" for s in g.seeds)
    return f"{g.text()} in 60 steps ({seeds}); beyond noise on {g.seeds_text()} seeds"


def no_critic_figure() -> str:
    d = grids.data("tiny-cpu-aux-sk-drgrpo")
    seeds = sorted(d["sokoban"], key=int)
    diff = difference([100 * d["sokoban"][s]["drgrpo-dapo"]["success_rate"] for s in seeds],
                      [100 * d["sokoban"][s]["dapo"]["success_rate"] for s in seeds])  # fmt: skip
    return (f"without: {_g('tiny-cpu-aux-sk-drgrpo', 'sokoban', 'drgrpo-dapo')}; with: "
            f"{_g('tiny-cpu-aux-sk-drgrpo', 'sokoban', 'dapo', method=False)}; without minus with "
            f"{diff.format()} (seed t)")  # fmt: skip


def smollm2_h200_warm() -> str:
    d = grids.data("smollm2-gpu-h200")
    cells = []
    for env in ("sokoban", "frozen_lake"):
        w = d[env]["0"]["warm"]
        run, planned = grids.planned_sft_steps("smollm2-gpu-h200", env, "0")
        cells.append(f"{env} {pct(w['success_rate'])} after {run} of {planned} SFT steps "
                     f"(reply accuracy {sources.warm_fit(w):.2f} at the time box)")  # fmt: skip
    return "; ".join(cells) + " on 512 held-out states"


def smollm2_h200_rl() -> str:
    return "; ".join(
        f"{env} {_g('smollm2-gpu-h200', env, 'base')}" for env in ("frozen_lake", "sokoban")
    )


def one_seed(stem: str, env: str, variant: str) -> str:
    g = grids.gain(stem, env, variant)
    s = g.seeds[0]
    return f"{pct(s.before)} -> {pct(s.after)}, {g.text()}"


def smollm2_cpu_warm() -> str:
    cells = []
    for stem, env in (("smollm2-cpu-sk", "sokoban"), ("smollm2-cpu-fl", "frozen_lake")):
        w = grids.data(stem)[env]["0"]["warm"]
        cells.append(f"{env} {pct(w['success_rate'])} of 256 held-out states after {w['sft_steps']} "
                     f"SFT steps in {w['sft_seconds'] / 60:.0f} min (reply accuracy {sources.warm_fit(w):.2f})")  # fmt: skip
    return "; ".join(cells)


def smollm2_cpu_rl() -> str:
    return (f"lr 1e-5: sokoban {one_seed('smollm2-cpu-sk', 'sokoban', 'lr1e-5')}, frozen_lake "
            f"{one_seed('smollm2-cpu-fl', 'frozen_lake', 'lr1e-5')}; lr 2e-5: sokoban "
            f"{one_seed('smollm2-cpu-sk', 'sokoban', 'base')}, frozen_lake "
            f"{one_seed('smollm2-cpu-fl', 'frozen_lake', 'base')}; lr 1e-5 for 60 steps: "
            f"{one_seed('smollm2-cpu-sk', 'sokoban', 'lr1e-5-60')}")  # fmt: skip


def smollm2_compact() -> str:
    return (f"five optimizer steps per update {_g('smollm2-gpu-h200-sk-compact', 'sokoban', 'five-steps')}; "
            f"one {_g('smollm2-gpu-h200-sk-compact', 'sokoban', 'one-step')}")  # fmt: skip


def smollm2_lr() -> str:
    cells = []
    for v in ("five-steps-lr5e-5", "five-steps-lr1e-4"):
        kl = grids.first_kl("smollm2-gpu-h200-sk-lr", "sokoban", "0", v)
        cells.append(
            f"`{v}` {one_seed('smollm2-gpu-h200-sk-lr', 'sokoban', v)}, first update's KL {kl}"
        )
    return "; ".join(cells)


def smollm2_kl() -> str:
    cells = []
    for v in ("lr2e-5", "lr5e-5", "lr5e-5-warm5"):
        kl = grids.first_kl("smollm2-cpu-sk-kl", "sokoban", "0", v)
        cells.append(f"`{v}` KL {kl}, held-out {one_seed('smollm2-cpu-sk-kl', 'sokoban', v)}")
    return "; ".join(cells) + " (64 rooms)"


LEVERS = "smollm2-cpu-sk-levers"


def smollm2_levers() -> str:
    """SmolLM2's Sokoban RL from a warm start with room: one optimizer step per update
    against about six, paired on the same 512 held-out rooms."""
    study = grids.data(LEVERS)
    d, stop = study["sokoban"], study["config"]["sft"]["stop_at_success"]
    warm = d["0"]["warm"]
    onestep = grids.gain(LEVERS, "sokoban", "onestep")
    seeds = ", ".join(f"s{s.seed} {100 * s.gain:+.1f}" for s in onestep.seeds)
    cells = [f"warm start {pct(warm['success_rate'])} (SFT stopped after {warm['sft_steps']} steps, "
             f"once it solved {stop:.0%} of its own SFT rooms); one optimizer step per update "
             f"{onestep.text()} ({len(onestep.seeds)} RL seeds from that warm start: {seeds})"]  # fmt: skip
    if "control" in d["0"]:
        cells.append(f"about six (the preset's mini-batches of 32 turns), seed 0: "
                     f"{one_seed(LEVERS, 'sokoban', 'control')}")  # fmt: skip
    return "; ".join(cells)


def bf16_figure() -> str:
    d = grids.data("smollm2-cpu-sk")["sokoban"]["0"]
    bf16, fp32 = d["lr1e-5"]["seconds_per_step"], d["fp32"]["seconds_per_step"]
    return (f"{fp32:.1f} s a step in float32 (`fp32`, lr 2e-5) against {bf16:.1f} with bf16 autocast "
            f"(`lr1e-5`), side by side on one thread each: {fp32 / bf16:.2f}x; one run each")  # fmt: skip


def reference_figure() -> str:
    ref = sources.load(F("reference"))["findings"]["diversity"]
    return f"random {pct(ref['random']['success_rate'])}, oracle {pct(ref['oracle']['success_rate'])} of 256 held-out maps"


@dataclass(frozen=True)
class Claim:
    text: str
    figure: Callable[[], str]
    files: tuple[str, ...]
    seeds: str


CLAIMS = (
    Claim("`make demo`'s RL gain over seeds (the demo's own command)", demo_figure,
          tuple(sources.demo_seed_files()[:1]) or ("experiments/demo_seeds/results/",), "0, 1, 2"),
    Claim("the same at other float roundings (`mtbN`: micro-batches of N tokens)",
          demo_variants_figure, tuple(sources.demo_seed_files()[1:]) or
          ("experiments/demo_seeds/results/",), _variant_seeds()),
    *(Claim(f"finding {f.number}: {f.claim}", (lambda k=f.key: finding_figure(k)),
            tuple(F(n) for n in f.files), "per FINDINGS") for f in findings.FINDINGS),
    Claim("random and oracle play on the findings' FrozenLake held-out maps", reference_figure,
          (F("reference"),), "-"),
    Claim("an auxiliary grounding target lets SFT fit on every seed (tiny:nano)", aux_figure,
          (G("tiny-cpu-aux"), G("tiny-cpu-warm")), "0, 1, 2"),
    Claim("dynamic sampling on Sokoban from those warm starts, 40 steps",
          lambda: dapo_figure("tiny-cpu-aux"), (G("tiny-cpu-aux"),), "0, 1, 2"),
    Claim("the same for 80 steps", lambda: dapo_figure("tiny-cpu-aux-dapo80"),
          (G("tiny-cpu-aux-dapo80"),), "0, 1, 2"),
    Claim("at 64-256 episodes per update, no RL variant adds on FrozenLake from those warm starts",
          small_batches_figure, tuple(dict.fromkeys(G(s) for s, _ in FL_SMALL)), "0, 1, 2"),
    Claim("1,024 episodes per update, 40 steps, lr 1e-4 (FrozenLake)",
          lambda: _g("tiny-cpu-aux-fl-x16", "frozen_lake", "x16-drgrpo"), (G("tiny-cpu-aux-fl-x16"),), "0, 1, 2"),
    Claim("1,024 episodes per update at lr 3e-4 for 60 steps (FrozenLake; the demo's RL recipe)",
          x16_figure, (G("tiny-cpu-aux-fl-x16-state"),), "0, 1, 2"),
    Claim("Sokoban's dynamic sampling without the critic (Dr.GRPO)", no_critic_figure,
          (G("tiny-cpu-aux-sk-drgrpo"),), "0, 1, 2"),
    Claim("SmolLM2-135M SFT warm starts on the grids", smollm2_h200_warm, (G("smollm2-gpu-h200"),), "0"),
    Claim("SmolLM2: 3-8 RL steps at 1,024 episodes", smollm2_h200_rl, (G("smollm2-gpu-h200"),), "0, 1, 2"),
    Claim("SmolLM2 Sokoban RL with compact prompts, 10-15 steps of 1,024 episodes", smollm2_compact,
          (G("smollm2-gpu-h200-sk-compact"),), "0, 1"),
    Claim("SmolLM2 Sokoban RL at larger learning rates", smollm2_lr, (G("smollm2-gpu-h200-sk-lr"),), "0"),
    Claim("SmolLM2's grid warm starts on the 2-core CPU", smollm2_cpu_warm,
          (G("smollm2-cpu-sk"), G("smollm2-cpu-fl")), "0"),
    Claim("SmolLM2 RL on the 2-core CPU, 20 steps of 32 episodes", smollm2_cpu_rl,
          (G("smollm2-cpu-sk"), G("smollm2-cpu-fl")), "0"),
    Claim("SmolLM2's first RL update on the CPU, and the lr ramp", smollm2_kl, (G("smollm2-cpu-sk-kl"),), "0"),
    Claim("bf16 autocast in SmolLM2's RL step on the CPU", bf16_figure, (G("smollm2-cpu-sk"),), "0"),
    Claim("SmolLM2 Sokoban RL from a warm start with room, 2-core CPU, 40 steps of 32 episodes at lr 1e-5",
          smollm2_levers, (G(LEVERS),), "0 (warm start); 0, 1, 2 (RL)"),
)  # fmt: skip


def _provenance_cells(files: tuple[str, ...]) -> tuple[str, str, str]:
    ps = [sources.provenance(f) for f in files if not f.endswith("/")]
    if not ps:
        return "-", "-", "-"
    uniq = lambda key: ", ".join(dict.fromkeys(p[key] for p in ps))  # noqa: E731
    commands = "; ".join(dict.fromkeys(f"`{p['command'].strip()}`" for p in ps))
    return commands, uniq("device"), f"{uniq('commit')} ({uniq('date')})"


def results_summary() -> str:
    """RESULTS' summary: claim, figure with its interval, command, device, seeds, commit."""
    rows = []
    for c in CLAIMS:
        command, device, commit = _provenance_cells(c.files)
        rows.append([c.text, c.figure(), command, device, c.seeds, commit])
    head = ["claim", "figure (95% interval; method)", "command", "device", "seeds", "commit (date)"]
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
                      *("| " + " | ".join(r) + " |" for r in rows)])  # fmt: skip


def noise_sentence() -> str:
    """The binomial noise of one cell at 50% success for the cell sizes the docs use."""
    from ragen.stats import binomial_half_width

    cells = [
        f"±{100 * binomial_half_width(0.5, n):.1f} points on {n} states"
        for n in (64, 128, 256, 512)
    ]
    se = [f"{100 * binomial_half_width(0.5, n) / 1.96:.1f}" for n in (64, 128, 256, 512)]
    return (
        f"a success rate near 50% carries a 95% binomial half-width of {', '.join(cells)} "
        f"(standard errors {', '.join(se)}; `ragen.stats.binomial_half_width`)"
    )


def readme_smollm2() -> str:
    """The README's one sentence on SmolLM2's measured grid results."""
    return (f"Measured (docs/RESULTS.md, \"The grids with SmolLM2\"): on the 2-core CPU, "
            f"{smollm2_cpu_warm()}; then 20 RL steps of 32 episodes at {smollm2_cpu_rl()}. "
            f"From a Sokoban warm start with room (`smollm2-cpu-sk-levers`), 40 RL steps of 32 "
            f"episodes at lr 1e-5: {smollm2_levers()}.")  # fmt: skip

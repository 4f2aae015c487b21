"""docs/FINDINGS.md's tables and verdicts, from ``experiments/findings/results/*.json``.

Each finding's JSON (``python -m experiments.findings.run NAME``) holds, per variant and
seed, the run's first and last validation (``outcome_first``, ``outcome_last``), its
table metrics over the last steps, the held-out evaluation of its warm start and final
policy where the finding has one (``heldout_warm``, ``heldout``), and the collapse
study's thresholds and scores. What a table shows is only that; a figure a run logged
but the file did not keep (a curve's value at some step) is not in these tables.

:data:`FINDINGS` lists the findings in the page's order, each with the parts its
verdict is judged on (:mod:`experiments.report.verdicts`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from experiments.findings.config import load_finding
from experiments.report import sources
from experiments.report.gains import SeedGain, difference, mean_sd, pool, seed_gain
from experiments.report.tables import markdown_table
from experiments.report.verdicts import (
    DELTA_STEPS,
    Part,
    finding_verdict,
    part_verdict,
)
from ragen.stats import Interval, binomial_half_width, seed_t_interval

RESULTS = "experiments/findings/results"


def path(name: str) -> str:
    return f"{RESULTS}/{name}.json"


@functools.cache
def config(name: str):
    """The finding's config (labels, steps, validation size), by the name its results
    file was written under (``actions-plain-sft`` reads ``actions``)."""
    base = name.split("-")[0] if name.startswith("actions") else name
    return load_finding(base)


def runs(name: str) -> dict[str, dict[str, dict[str, Any]]]:
    return sources.load(path(name))["runs"]


def label(name: str, variant: str) -> str:
    v = config(name).variants.get(variant)
    return (v.label if v is not None and v.label else variant) or variant


def per_seed(name: str, variant: str, key: str) -> dict[str, float]:
    """``{seed: value}`` of one metric of a variant (seeds that logged it)."""
    return {s: float(r[key]) for s, r in runs(name)[variant].items() if key in r}


def paired(name: str, a: str, b: str, key: str, other: str | None = None) -> Interval:
    """``a - b`` of metric ``key`` (of ``other`` for ``b`` when given) paired by seed, in
    points for rates: the seed-level t interval."""
    x, y = per_seed(name, a, key), per_seed(name, b, other or key)
    seeds = sorted(set(x) & set(y), key=int)
    return difference([100 * x[s] for s in seeds], [100 * y[s] for s in seeds])


def heldout_pairs(name: str, variant: str) -> list[SeedGain]:
    """Per seed, the warm start's and the final policy's held-out evaluations, paired
    state by state where the file kept per-state outcomes (``heldout``), else by rate."""
    evals = sources.load(path(name)).get("heldout", {})
    n = config(name).eval_episodes
    out = []
    for seed, r in runs(name)[variant].items():
        if "heldout" not in r:
            continue
        after = evals.get(f"{variant}/seed{seed}", {"success_rate": r["heldout"]})
        before = evals.get(after.get("warm", ""), {"success_rate": r["heldout_warm"]})
        out.append(seed_gain(seed, before, after, n))
    return out


def heldout_gains(name: str, variant: str) -> dict[str, float]:
    """Per seed, held-out success after RL minus the warm start's (points)."""
    return {s.seed: 100 * s.gain for s in heldout_pairs(name, variant)}


def _cell(values: list[float], pct: bool = True) -> str:
    if not values:
        return "-"
    return mean_sd(values) if pct else mean_sd(values, scale=1.0, unit="", digits=3)


def _col(name: str, variant: str, key: str, pct: bool = True) -> str:
    return _cell(list(per_seed(name, variant, key).values()), pct)


def _seeds_last(name: str, variant: str) -> str:
    return ", ".join(
        f"s{s} {100 * v:.1f}" for s, v in per_seed(name, variant, "outcome_last").items()
    )


def _gain_cells(name: str, variant: str) -> list[str]:
    """Warm start, after RL, the pooled gain with its interval, each seed's gain."""
    pairs = heldout_pairs(name, variant)
    g = pool(pairs)
    each = ", ".join(f"{100 * s.gain:+.1f}" for s in pairs)
    return [_cell([s.before for s in pairs]), _cell([s.after for s in pairs]), g.text(), each]


# -- tables -----------------------------------------------------------------------------
def validation_table(name: str, extra: list[tuple[str, str, bool]]) -> str:
    """Variants' validation success at the first and last check, then ``extra`` columns
    ``(metric, title, is_rate)`` over the run's last steps."""
    cfg = config(name)
    rows = []
    for variant, rs in runs(name).items():
        head = f"{label(name, variant)} ({len(rs)} seeds)"
        cells = [head, _col(name, variant, "outcome_first"), _col(name, variant, "outcome_last"),
                 _seeds_last(name, variant)]  # fmt: skip
        cells += [_col(name, variant, key, pct) for key, _, pct in extra]
        rows.append(cells)
    last = cfg.table_last
    head = ["variant", f"validation success, step {cfg.val_every} (first check)",
            f"step {cfg.steps} (last)", "per seed, last"]  # fmt: skip
    head += [f"{title}, last {last} steps" for _, title, _ in extra]
    return markdown_table(head, rows)


def heldout_table(name: str, extra: list[tuple[str, str, bool]]) -> str:
    """Held-out success of each variant's warm start and final policy, the gain paired
    by seed with its seed-level t interval, then ``extra`` columns over the last steps."""
    cfg = config(name)
    rows = []
    for variant, rs in runs(name).items():
        cells = [f"{label(name, variant)} ({len(rs)} seeds)", *_gain_cells(name, variant)]
        cells += [_col(name, variant, key, pct) for key, _, pct in extra]
        rows.append(cells)
    n = cfg.eval_episodes
    head = ["variant", f"held-out success ({n} states): warm start", "after RL",
            "gain, 95% interval (points)", "gain per seed"]  # fmt: skip
    head += [f"{title}, last {cfg.table_last} steps" for _, title, _ in extra]
    return markdown_table(head, rows)


def actions_table() -> str:
    """Each action budget's warm start and RL gain under the three warm-start recipes."""
    recipes = [("actions-plain-sft", "free_think, plain SFT"),
               ("actions-aux-free_think", "free_think, auxiliary format"),
               ("actions", "no_think, the grid study's recipe")]  # fmt: skip
    head = ["k moves per reply"]
    for i, (_, title) in enumerate(recipes, 1):
        head += [f"{i}. {title}: warm start", "RL gain (seed t)"]
    rows = []
    for variant in runs("actions"):
        cells = [variant.removeprefix("k")]
        for name, _ in recipes:
            if variant not in runs(name):
                cells += ["-", "-"]
                continue
            warm, _, gain, _ = _gain_cells(name, variant)
            cells += [warm, gain.split(" (")[0]]
        rows.append(cells)
    return markdown_table(head, rows)


def collapse_table(name: str, which: str = "scored") -> str:
    """The collapse study's scores: per signal, collapses warned before / at or after /
    missed, the leads, and false alarms on the runs that do not collapse."""
    study = sources.load(path(name))["collapse"]
    rows = []
    for signal, s in study[which].items():
        leads = ", ".join(f"{x:+d}" for x in s["leads"]) or "-"
        rows.append([f"`{signal}`", str(s["collapsing"]), str(s["early"]), str(s["late"]),
                     str(s["missed"]), leads, f"{s['false_alarms']} of {s['healthy']}"])  # fmt: skip
    head = ["signal", "runs that collapse", "warned before the collapse", "at or after it",
            "missed", "lead, steps (collapse - warning)", "false alarms on runs that do not"]  # fmt: skip
    return markdown_table(head, rows)


def thresholds_table(name: str) -> str:
    t = sources.load(path(name))["collapse"]["thresholds"]
    rows = []
    for signal, value in t["thresholds"].items():
        extreme = t["healthy_extremes"].get(signal)
        note = t.get("notes", {}).get(signal, "")
        rows.append([f"`{signal}`", "-" if extreme is None else f"{extreme:.3f}",
                     "not measurable" if value is None else f"**{value:g}**", note])  # fmt: skip
    seeds = ", ".join(map(str, t["calibrate_seeds"]))
    head = ["signal", f"healthy extreme, seeds {seeds}", "threshold", "note"]
    return markdown_table(head, rows)


def mi_runs_table() -> str:
    """Per run of ``mi_collapse``: success first / last check, MI over the last steps,
    and whether it collapsed (the study's collapse criterion)."""
    study = sources.load(path("mi_collapse"))["collapse"]
    collapsed = set(study["thresholds"]["collapsing_runs"])
    collapsed |= {r["label"] for r in study["runs"] if r["collapses"] is not None}
    rows = []
    for variant, rs in runs("mi_collapse").items():
        for seed, r in rs.items():
            name = f"{label('mi_collapse', variant)} s{seed}"
            rows.append([name, f"{100 * r['outcome_first']:.1f}%", f"{100 * r['outcome_last']:.1f}%",
                         f"{r['reasoning/mutual_info']:.2f}".replace("-0.00", "0.00"), "yes" if name in collapsed else "no"])  # fmt: skip
    head = [
        "run",
        "validation success, first check",
        "last",
        "MI (nats), last 5 steps",
        "collapses",
    ]
    return markdown_table(head, rows)


# -- parts and verdicts -------------------------------------------------------------------
def _events(leads: list[int]) -> Interval | None:
    """The mean warning lead over events with its t interval (None with < 2 events)."""
    if len(leads) < 2:
        return None
    t = seed_t_interval([float(x) for x in leads])
    return Interval(t.mean, t.low, t.high, t.n, "event t")


def echo_trap_parts() -> list[Part]:
    grpo = per_seed("echo_trap", "grpo", "outcome_first")
    drop = paired("echo_trap", "grpo", "grpo", "outcome_first", other="outcome_last")
    return [
        Part("critic-free RL (GRPO) collapses", "GRPO's validation success, first check minus last",
             drop, len(grpo)),
        Part("a critic delays the collapse", "StarPO (PPO + critic) minus GRPO, last validation",
             paired("echo_trap", "starpo", "grpo", "outcome_last"), len(grpo)),
        Part("the collapse is an echo trap (the reasoning converges to templates)",
             "distinct thoughts per step", None, 0,
             why="the per-step thought diversity is not in the results file (withdrawn)"),
    ]  # fmt: skip


def prediction_parts() -> list[Part]:
    scored = sources.load(path("echo_trap"))["collapse"]["scored"]
    parts = []
    claims = {"group_reward_std": "the in-group reward std falls before the collapse",
              "entropy": "the entropy falls before the collapse",
              "grad_norm": "gradient-norm spikes mark the collapse"}  # fmt: skip
    for signal, claim in claims.items():
        s = scored[signal]
        interval = _events(s["leads"])
        why = f"{s['early']} of {s['collapsing']} scored collapses warned before, {s['late']} at or after, {s['missed']} missed; all are GRPO's on the bandit"
        parts.append(Part(claim, f"`{signal}` lead over the scored collapses", interval,
                          s["collapsing"], unit="steps", delta=DELTA_STEPS, why=why))  # fmt: skip
    return parts


def grid_filter_part(env: str) -> Part:
    """StarPO-S's top 25% against every group in the grid study (fitted warm starts)."""
    data = sources.load("experiments/grids/results/tiny-cpu-aux.json")
    rows = data[env]
    seeds = sorted((s for s in rows if "top25" in rows[s] and "all" in rows[s]), key=int)
    i = difference([100 * rows[s]["top25"]["success_rate"] for s in seeds],
                   [100 * rows[s]["all"]["success_rate"] for s in seeds])  # fmt: skip
    name = {"frozen_lake": "FrozenLake", "sokoban": "Sokoban"}[env]
    return Part(f"the top 25% of groups train better than every group on {name}",
                f"{name}: held-out success after 40 RL steps, top 25% minus every group (grid study)", i, len(seeds))  # fmt: skip


def filter_parts() -> list[Part]:
    first = config("filter_ratio").val_every
    n = len(runs("filter_ratio")["grpo-p0.25"])
    return [
        Part("filtering prevents the collapse", "GRPO top 25% minus every group, last validation",
             paired("filter_ratio", "grpo-p0.25", "grpo-p1.00", "outcome_last"), n),
        Part("filtering speeds learning (StarPO-S)", f"top 25% minus every group, validation at step {first}",
             paired("filter_ratio", "p0.25", "p1.00", "outcome_first"), n),
        grid_filter_part("frozen_lake"),
        grid_filter_part("sokoban"),
    ]  # fmt: skip


def diversity_parts() -> list[Part]:
    g32, g4 = heldout_gains("diversity", "s32x2"), heldout_gains("diversity", "s4x16")
    seeds = sorted(set(g32) & set(g4), key=int)
    i = difference([g32[s] for s in seeds], [g4[s] for s in seeds])
    return [Part("more initial states per update train better at a fixed budget",
                 "held-out gain, 32 states x 2 minus 4 x 16", i, len(seeds))]  # fmt: skip


def random_play(name: str) -> float | None:
    """Random play's success on the finding's held-out states
    (``python -m experiments.findings.reference``), or None when not measured."""
    base = config(name)
    ref = sources.ROOT / path("reference")
    if not ref.is_file():
        return None
    for key, row in sources.load(path("reference"))["findings"].items():
        if config(key).env == base.env and config(key).max_turns == base.max_turns:
            return row["random"]["success_rate"]
    return None


def above_random(name: str, variant: str) -> bool:
    """Whether the variant's warm starts play above random play by more than the two
    cells' binomial noise (the mean over seeds against the reference)."""
    r = runs(name)[variant]
    warm = sum(x["heldout_warm"] for x in r.values()) / len(r)
    rand = random_play(name)
    if rand is None:
        return True
    n = config(name).eval_episodes
    noise = math.hypot(binomial_half_width(warm, n), binomial_half_width(rand, n))
    return warm - rand > noise


def actions_parts() -> list[Part]:
    parts = []
    recipes = {"actions-plain-sft": "free_think, plain SFT",
               "actions-aux-free_think": "free_think, auxiliary format",
               "actions": "no_think, the grid study's recipe"}  # fmt: skip
    for name, recipe in recipes.items():
        g5, g1 = heldout_gains(name, "k5"), heldout_gains(name, "k1")
        seeds = sorted(set(g5) & set(g1), key=int)
        low = [k for k in ("k1", "k5") if not above_random(name, k)]
        why = (f"the warm starts of {' and '.join(low)} play at random play's level "
               "(`reference.json`): the setup cannot compare action budgets") if low else ""  # fmt: skip
        parts.append(Part(f"5 moves a reply train better than 1 ({recipe})",
                          f"held-out RL gain, k = 5 minus k = 1 (`{name}`)",
                          difference([g5[s] for s in seeds], [g1[s] for s in seeds]),
                          len(seeds), setup_ok=not low, why=why))  # fmt: skip
    return parts


def freshness_parts() -> list[Part]:
    first = config("freshness").val_every
    n = len(runs("freshness")["fresh"])
    last = [r["outcome_last"] for v in runs("freshness").values() for r in v.values()]
    ceiling = all(x >= 1.0 for x in last)
    return [
        Part("fresh rollouts learn faster per update", f"fresh minus reused 4x, validation at step {first}",
             paired("freshness", "fresh", "reuse4", "outcome_first"), n),
        Part("fresh rollouts train better", "fresh minus reused 4x, train success over the last steps",
             paired("freshness", "fresh", "reuse4", "rollout/success_rate"), n),
        Part("fresh rollouts end better", "fresh minus reused 4x, last validation",
             paired("freshness", "fresh", "reuse4", "outcome_last"), n, setup_ok=not ceiling,
             why="every run ends at 100%: the ceiling" if ceiling else ""),
    ]  # fmt: skip


def reasoning_parts() -> list[Part]:
    gr, g = heldout_gains("reasoning", "gwm-rewarded"), heldout_gains("reasoning", "gwm")
    seeds = sorted(set(gr) & set(g), key=int)
    return [
        Part("reasoning-aware rewards help success", "held-out gain, with minus without reasoning rewards",
             difference([gr[s] for s in seeds], [g[s] for s in seeds]), len(seeds)),
        Part("reasoning-aware rewards keep the reasoning grounded",
             "grounding score x 100 over the last steps, with minus without",
             paired("reasoning", "gwm-rewarded", "gwm", "reward/grounding"), len(seeds)),
        Part("without them the reasoning decays", "grounding at the start against the end", None, 0,
             why="the runs' first grounding values are not in the results file"),
    ]  # fmt: skip


def mi_parts() -> list[Part]:
    study = sources.load(path("mi_collapse"))["collapse"]
    collapses = len(study["thresholds"]["collapsing_runs"])
    collapses += sum(1 for r in study["runs"] if r["collapses"] is not None)
    total = sum(len(v) for v in runs("mi_collapse").values())
    scored = study["scored"]["mutual_info"]
    return [
        Part("MI falls in reasoning collapse", "MI over a collapsing run", None, collapses,
             why=f"{collapses} of {total} runs collapse: one event cannot carry a verdict"),
        Part("MI warns before the collapse", "`mutual_info` lead over the scored collapses",
             _events(scored["leads"]), scored["collapsing"], unit="steps", delta=DELTA_STEPS,
             why=f"{scored['collapsing']} scored runs collapse; false alarms on {scored['false_alarms']} of the {scored['healthy']} that do not"),
    ]  # fmt: skip


@dataclass(frozen=True)
class Finding:
    key: str  # the block argument
    number: str
    claim: str
    command: str
    files: tuple[str, ...]
    parts: Callable[[], list[Part]]


FINDINGS = (
    Finding("echo_trap", "1", "multi-turn RL collapses into the echo trap",
            "python -m experiments.findings.run echo_trap", ("echo_trap",), echo_trap_parts),
    Finding("prediction", "2", "collapse is predictable from reward std, entropy, grad norm",
            "python -m experiments.findings.run echo_trap", ("echo_trap",), prediction_parts),
    Finding("filter", "3", "uncertainty (reward-variance) filtering stabilizes and improves",
            "python -m experiments.findings.run filter_ratio", ("filter_ratio", "filter_variants"),
            filter_parts),
    Finding("diversity", "4a", "diverse initial states help",
            "python -m experiments.findings.run diversity --jobs 2", ("diversity",), diversity_parts),
    Finding("actions", "4b", "a moderate action budget per turn helps",
            "python -m experiments.findings.run actions --jobs 2",
            ("actions", "actions-aux-free_think", "actions-plain-sft"), actions_parts),
    Finding("freshness", "4c", "fresh rollouts help", "python -m experiments.findings.run freshness",
            ("freshness",), freshness_parts),
    Finding("reasoning", "5-6", "reasoning persists only with reasoning-aware rewards",
            "python -m experiments.findings.run reasoning --jobs 2", ("reasoning",), reasoning_parts),
    Finding("mi", "RAGEN-2", "the prompt/reasoning MI falls in reasoning collapse",
            "python -m experiments.findings.run mi_collapse --jobs 2", ("mi_collapse",), mi_parts),
)  # fmt: skip
BY_KEY = {f.key: f for f in FINDINGS}


def where(f: Finding) -> str:
    """``bandit, 6 seeds``: the env and the seeds of the finding's first results file."""
    name = f.files[0]
    seeds = max(len(v) for v in runs(name).values())
    return f"{config(name).env}, {seeds} seeds"


def verdict_block(key: str) -> str:
    """A finding's verdict and, per part, the claim, the measure, the evidence and the
    part's verdict."""
    f = BY_KEY[key]
    parts = f.parts()
    lines = [f'**Verdict: {finding_verdict(parts)}** (the rule: "How a verdict is reached" above).']
    lines.append("")
    for p in parts:
        lines.append(
            f"* **{part_verdict(p)}**: {p.claim}. {p.measure[0].upper()}{p.measure[1:]}: {p.evidence()}."
        )
    return "\n".join(lines)


def summary_block() -> str:
    """The page's opening table: one row per finding with its verdict and evidence."""
    rows = []
    for f in FINDINGS:
        parts = f.parts()
        evidence = "; ".join(f"{p.claim}: {p.verdict}" for p in parts)
        rows.append([f.number, f.claim, f"`{f.command}`", where(f),
                     f"**{finding_verdict(parts)}** ({evidence})"])  # fmt: skip
    return markdown_table(["#", "the paper's finding", "command", "where", "verdict (parts)"], rows)


def noise_sentence() -> str:
    """The sampling noise of one validation cell of the bandit sweeps (binomial)."""
    n = config("echo_trap").val_groups
    h = 100 * binomial_half_width(0.5, n)
    return f"{n} held-out episodes, so ±{h:.1f} points at 50% success (95% binomial half-width)"


def results_index() -> str:
    """experiments/findings/results.md's table: each finding's files and whether it ran."""
    rows = []
    for name in ("echo_trap", "filter_ratio", "filter_variants", "freshness", "diversity",
                 "actions", "reasoning", "mi_collapse"):  # fmt: skip
        cfg = config(name)
        p = sources.ROOT / path(name)
        if p.is_file():
            seeds = max(len(v) for v in runs(name).values())
            state = f"run ({cfg.env}, {seeds} seeds)"
            files = f"`results/{name}.md`, `results/{name}.json`, `results/{name}.png`"
        else:
            state, files = f"not run yet ({cfg.env})", "-"
        rows.append([cfg.title or name, f"`configs/{name}.yaml`", files, state])
    return markdown_table(["finding", "config", "results", "state"], rows)


def table_block(name: str) -> str:
    """The table(s) of one finding's sweep."""
    renderers: dict[str, Callable[[], str]] = {
        "echo_trap": lambda: validation_table("echo_trap", [
            ("rollout/success_rate", "train success", True),
            ("rollout/group_reward_std", "in-group reward std", False),
            ("actor/entropy", "entropy", False)]),
        "echo_trap-thresholds": lambda: thresholds_table("echo_trap"),
        "echo_trap-scored": lambda: collapse_table("echo_trap"),
        "filter_ratio": lambda: validation_table("filter_ratio", [
            ("filter/kept_sample_frac", "samples trained on", True)]),
        "filter_variants": lambda: validation_table("filter_variants", [
            ("filter/kept_sample_frac", "samples trained on", True)]),
        "diversity": lambda: heldout_table("diversity", [
            ("rollout/group_reward_std", "in-group reward std", False)]),
        "actions": actions_table,
        "freshness": lambda: validation_table("freshness", [
            ("rollout/success_rate", "train success", True),
            ("actor/pg_clipfrac", "PPO clip fraction", False)]),
        "mi_collapse": lambda: validation_table("mi_collapse", [
            ("rollout/success_rate", "train success", True),
            ("reasoning/mutual_info", "MI (nats)", False),
            ("reasoning/retrieval_acc", "retrieval accuracy", True)]),
        "mi_collapse-runs": mi_runs_table,
        "mi_collapse-scored": lambda: collapse_table("mi_collapse"),
        "reasoning": lambda: heldout_table("reasoning", [
            ("reward/grounding", "grounding", False)]),
    }  # fmt: skip
    return renderers[name]()

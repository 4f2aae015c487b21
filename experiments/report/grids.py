"""The grid studies' tables (``experiments/grids/results/<config>.json``), tiny model and
SmolLM2 alike.

A grid study's file holds, per env and seed, the warm start's evaluation on the study's
held-out states (``warm``: success, the SFT fit per epoch, SFT steps) and each RL
variant's (success, steps, seconds per step, training success per step, held-out
success by step; ``per_state`` outcomes in the files written since they were kept).
Beside some files: the run's log (``<config>.log``: how many SFT steps the time box let
through) and each run's step metrics (``<config>-...-metrics.jsonl``: the first update's
KL).
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

from experiments.report import sources
from experiments.report.gains import Gain, mean_sd, pct, pool, seed_gain
from experiments.report.tables import markdown_table
from ragen.stats import seed_t_interval

RESULTS = "experiments/grids/results"


def path(stem: str) -> str:
    return f"{RESULTS}/{stem}.json"


def data(stem: str) -> dict[str, Any]:
    return sources.load(path(stem))


def gain(stem: str, env: str, variant: str, warm_from: str | None = None) -> Gain:
    """The pooled RL gain of a variant (warm starts from ``warm_from``'s file when this
    file holds RL rows only)."""
    d = data(stem)
    seeds = sources.grid_pairs(d, env, variant)
    if not seeds and warm_from is not None:
        seeds = sources.grid_pairs(d, env, variant, warm=data(warm_from))
    if not seeds:
        raise KeyError(f"{stem}: no {env} / {variant} row with a warm start to pair")
    return pool(seeds)


def _split(args: list[str]) -> tuple[list[str], dict[str, str]]:
    return [a for a in args if "=" not in a], dict(a.split("=", 1) for a in args if "=" in a)


def expand(stems: list[str]) -> list[tuple[str, set[str] | None]]:
    """Block arguments to ``(stem, variants or None)``: ``STEM``, ``STEM:v1,v2`` (those
    variants only) or a glob (``smollm2-*``: every grid study file it matches, in name
    order, so a new results file shows up in the block the next time it is rebuilt)."""
    out: list[tuple[str, set[str] | None]] = []
    for arg in stems:
        stem, _, only = arg.partition(":")
        keep = set(only.split(",")) if only else None
        if "*" in stem:
            found = sorted((sources.ROOT / RESULTS).glob(f"{stem}.json"))
            out += [(p.stem, keep) for p in found if "config" in sources.load(path(p.stem))]
        else:
            out.append((stem, keep))
    return out


def _only(options: dict[str, str], key: str) -> set[str] | None:
    return set(options[key].split(",")) if key in options else None


def rl_table(args: list[str]) -> str:
    """``grid-table STEM ... [warm=STEM] [envs=x]``: every RL variant of the files, paired
    with its warm start (from ``warm``'s file for a file that holds RL rows only), the
    pooled gain with its interval, each seed's, and the seeds whose gain is beyond noise."""
    stems, options = _split(args)
    envs = _only(options, "envs")
    warm = data(options["warm"]) if "warm" in options else None
    files = expand(stems)
    rows = []
    for stem, keep in files:
        d = data(stem)
        for env in sources.grid_envs(d):
            if envs and env not in envs:
                continue
            for variant in sources.grid_variants(d, env):
                if keep and variant not in keep:
                    continue
                seeds = sources.grid_pairs(d, env, variant) or (
                    sources.grid_pairs(d, env, variant, warm=warm) if warm else []
                )
                if not seeds:
                    rows.append([f"`{stem}`", env, f"`{variant}`", "-", "-", "-",
                                 "no warm start in the file to pair with", "-", "-", "-"])  # fmt: skip
                    continue
                g = pool(seeds)
                steps = ", ".join(str(d[env][s.seed][variant].get("steps")) for s in g.seeds)
                each = ", ".join(
                    f"s{s.seed} {100 * s.before:.1f} -> {100 * s.after:.1f} ({100 * s.gain:+.1f})"
                    for s in g.seeds
                )
                rows.append([f"`{stem}`", env, f"`{variant}`", str(len(g.seeds)),
                             mean_sd([s.before for s in g.seeds]), mean_sd([s.after for s in g.seeds]),
                             g.text(), each, g.seeds_text(), steps])  # fmt: skip
    head = ["results file", "env", "variant", "seeds", "warm start", "after RL",
            "gain, 95% interval (points)", "per seed: warm -> after RL (gain)",
            "seeds beyond noise", "RL steps"]  # fmt: skip
    return (
        markdown_table(head, rows) + "\n\n" + sources.provenance_line([path(s) for s, _ in files])
    )


def steps_table(args: list[str]) -> str:
    """``grid-steps STEM ...``: the held-out gain at each evaluated RL step (variants
    evaluated more than once), mean over seeds with its seed-level t interval."""
    stems, _ = _split(args)
    rows = []
    for stem, keep in expand(stems):
        d = data(stem)
        for env in sources.grid_envs(d):
            for variant in sources.grid_variants(d, env):
                if keep and variant not in keep:
                    continue
                runs = [r for r in d[env].values() if variant in r and "warm" in r]
                curves = [r[variant].get("heldout_by_step", {}) for r in runs]
                steps = sorted({int(k) for c in curves for k in c})
                if len(steps) < 2:
                    continue
                cells = []
                for k in steps:
                    g = [100 * (c[str(k)] - r["warm"]["success_rate"])
                         for c, r in zip(curves, runs) if str(k) in c]  # fmt: skip
                    core = seed_t_interval(g).format() if len(g) > 1 else f"{g[0]:+.1f}"
                    cells.append(f"step {k}: {core}")
                rows.append([env, f"`{variant}`", str(len(runs)), "; ".join(cells)])
    head = ["env", "variant", "seeds", "held-out gain by RL step (points; seed t interval)"]
    return markdown_table(head, rows)


def planned_sft_steps(stem: str, env: str, seed: str) -> tuple[int, int] | None:
    """``(steps run, steps of the epoch)`` when the run's log says its SFT was
    time-boxed (``sft: ... N of M steps fit``)."""
    log = sources.ROOT / RESULTS / f"{stem}.log"
    if not log.is_file():
        return None
    needle = f"[{env} s{seed} "
    for line in log.read_text().splitlines():
        m = re.search(r"(\d+) of (\d+) steps fit", line)
        if line.startswith(needle) and m:
            return int(m.group(1)), int(m.group(2))
    return None


def warm_table(args: list[str]) -> str:
    """``grid-warm STEM ...``: each file's warm starts: held-out success per seed, the
    last epoch's held-out reply accuracy, SFT steps (of the epoch, when time-boxed)."""
    stems, options = _split(args)
    envs = _only(options, "envs")
    stems = [stem for stem, _ in expand(stems)]
    rows = []
    for stem in stems:
        d = data(stem)
        n = d["config"]["eval_episodes"]
        for env in sources.grid_envs(d):
            if envs and env not in envs:
                continue
            seeds = sorted((s for s in d[env] if "warm" in d[env][s]), key=int)
            if not seeds:
                continue
            records = [d[env][s]["warm"] for s in seeds]
            if len({json.dumps(r, sort_keys=True) for r in records}) == 1 and len(seeds) > 1:
                seeds, records = seeds[:1], records[:1]  # one warm start shared by the seeds
            success = ", ".join(f"s{s} {pct(r['success_rate'])}" for s, r in zip(seeds, records))
            acc = ", ".join(_acc(r) for r in records)
            steps = []
            for s, r in zip(seeds, records):
                planned = planned_sft_steps(stem, env, s)
                text = str(r.get("sft_steps", "-"))
                if planned is not None:
                    text = f"{planned[0]} of {planned[1]} (time-boxed)"
                steps.append(text)
            rows.append([env, f"`{stem}`", str(n), success, acc, ", ".join(steps)])
    head = ["env", "results file", "held-out states", "warm start, per seed",
            "held-out reply accuracy (last SFT check)", "SFT steps"]  # fmt: skip
    return markdown_table(head, rows) + "\n\n" + sources.provenance_line([path(s) for s in stems])


def _acc(record: dict[str, Any]) -> str:
    value = sources.warm_fit(record)
    return "-" if value is None else f"{value:.2f}"


def metrics_file(stem: str, env: str, seed: str, variant: str) -> Path | None:
    """The step metrics of one RL run, by the names the study's sessions saved them
    under (one match or none)."""
    folder = sources.ROOT / RESULTS
    names = [f"{stem}-s{seed}-{variant}-metrics.jsonl", f"{stem}-{variant}-metrics.jsonl",
             f"{stem}-{variant}-rl-metrics.jsonl"]  # fmt: skip
    if variant == "base":
        names += [f"{stem}-rl-metrics.jsonl", f"{stem}-{env}-metrics.jsonl"]
    found = [folder / n for n in names if (folder / n).is_file()]
    return found[0] if len(found) == 1 else None


def first_kl(stem: str, env: str, seed: str, variant: str) -> str:
    """The first update's mean approximate KL (``actor/ppo_kl``), from the step metrics."""
    f = metrics_file(stem, env, seed, variant)
    if f is None:
        return "-"
    first = json.loads(f.read_text().splitlines()[0])
    kl = first.get("actor/ppo_kl")
    return "-" if kl is None else f"{kl:.2g}"


def run_table(args: list[str]) -> str:
    """``grid-runs STEM ...``: one row per (env, variant, seed): warm start, after RL, the
    gain (its interval, or the cells' noise with one seed and no per-state outcomes),
    held-out success by step, steps, seconds per step, training success over the first
    and last five steps, and the first update's KL."""
    stems, _ = _split(args)
    files = expand(stems)
    rows = []
    for stem, keep in files:
        d = data(stem)
        for env in sources.grid_envs(d):
            for variant in sources.grid_variants(d, env):
                if keep and variant not in keep:
                    continue
                for s in sources.grid_pairs(d, env, variant):
                    r = d[env][s.seed][variant]
                    train = r.get("train_success") or []
                    by_step = "; ".join(f"{k}: {100 * (v - s.before):+.1f}"
                                        for k, v in sorted(r.get("heldout_by_step", {}).items(),
                                                           key=lambda kv: int(kv[0])))  # fmt: skip
                    head5 = statistics.mean(train[:5]) if train else None
                    tail5 = statistics.mean(train[-5:]) if train else None
                    rows.append([f"`{stem}`", env, f"`{variant}`", s.seed, pct(s.before), pct(s.after),
                                 pool([s]).text(), by_step or "-", str(r.get("steps", "-")),
                                 _num(r.get("seconds_per_step")),
                                 f"{_rate(head5)} / {_rate(tail5)}",
                                 first_kl(stem, env, s.seed, variant)])  # fmt: skip
    head = ["results file", "env", "variant", "seed", "warm start", "after RL", "gain (points)",
            "gain by RL step", "RL steps", "s/step", "training success, first / last 5 steps",
            "first update's KL"]  # fmt: skip
    return (
        markdown_table(head, rows) + "\n\n" + sources.provenance_line([path(s) for s, _ in files])
    )


def _at(record: dict[str, Any], temperature: str | None) -> dict[str, Any] | None:
    """One evaluation's record at the study's temperature (None) or at another one."""
    return record if temperature is None else record.get("at_temperature", {}).get(temperature)


def temps_table(args: list[str]) -> str:
    """``grid-temps STEM``: each RL run's held-out gain over its warm start at every
    evaluated step, at the study's evaluation temperature and at each of its
    ``extra_eval_temperatures``, paired state by state with its 95% bootstrap interval
    and which side of 0 that interval lies on (one run's states: what the interval says
    of this warm start and seed, not of seeds); a cell is ``-`` where an evaluation did
    not keep its per-state outcomes."""
    (stem,), _ = _split(args)
    d = data(stem)
    config = d["config"]
    temps = [None] + [str(float(t)) for t in config.get("extra_eval_temperatures", [])]
    rows = []
    for env in sources.grid_envs(d):
        for variant in sources.grid_variants(d, env):
            for seed in sorted(d[env], key=int):
                row = d[env][seed]
                if variant not in row or "warm" not in row:
                    continue
                evals = row[variant].get("evals_by_step", {})
                for step, ev in sorted(evals.items(), key=lambda kv: int(kv[0])):
                    cells = []
                    for t in temps:
                        before, after = _at(row["warm"], t), _at(ev, t)
                        if not before or not after or "per_state" not in after:
                            cells.append("-")
                            continue
                        gain = pool([seed_gain(seed, before, after, 0)]).interval
                        side = "holds 0" if not gain.excludes_zero else (
                            "above 0" if gain.low > 0 else "below 0")  # fmt: skip
                        cells.append(f"{pct(before['success_rate'])} -> "
                                     f"{pct(after['success_rate'])}: {gain.format()} ({side})")  # fmt: skip
                    rows.append([env, f"`{variant}`", seed, step, *cells])
    names = [config.get("eval_temperature", 0.5), *temps[1:]]
    head = ["env", "variant", "seed", "RL step",
            *[f"temperature {t}: warm start -> after RL: gain [95%]" for t in names]]  # fmt: skip
    return markdown_table(head, rows) + "\n\n" + sources.provenance_line([path(stem)])


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _rate(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def eval_table(args: list[str]) -> str:
    """``grid-evals STEM``: a file of ``{policy: {success_rate, ...}}`` evaluations
    (``experiments.grids.eval_checkpoints``), with each cell's binomial noise."""
    from ragen.stats import binomial_half_width

    (stem,), options = _split(args)
    n = int(options["n"])
    rows = []
    for policy, r in data(stem).items():
        h = 100 * binomial_half_width(r["success_rate"], n)
        rows.append(
            [policy, f"{pct(r['success_rate'])} ± {h:.1f}", pct(r.get("format_error_rate"))]
        )
    head = ["policy", f"success on {n} held-out states (± 95% binomial)", "format errors"]
    return markdown_table(head, rows) + "\n\n" + sources.provenance_line([path(stem)])

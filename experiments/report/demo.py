"""The demo's figures, from the demo run over seeds
(``python -m experiments.demo_seeds.run``: ``experiments/demo_seeds/results/<label>.json``).

Such a file holds, per seed and env, every policy's evaluation on the held-out states
(``runs[seed][env][policy]``: ``success_rate`` and ``per_state`` outcomes, policies
``random``, ``oracle``, ``warm start (SFT)``, ``after RL``), and per seed its wall time.
The gains are recomputed here from the per-state outcomes (``ragen.stats``), not read
from the file's own summary. Until such a file is committed, each block says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.report import sources
from experiments.report.gains import Gain, pct, pool, seed_gain
from experiments.report.tables import markdown_table

ENVS = ("bandit", "frozen_lake", "sokoban")
WARM, AFTER = "warm start (SFT)", "after RL"
LABELS = {"bandit": "bandit (better arm)", "frozen_lake": "FrozenLake", "sokoban": "Sokoban"}
COMMAND = "python -m experiments.demo_seeds.run --seeds 0 1 2"
PLACEHOLDER = (
    "*Not measured yet: no results file. The demo over seeds (`{command}`, about an hour on "
    "2 cores) writes `experiments/demo_seeds/results/<label>.json`; `python -m "
    "experiments.report` then fills this {what} from it. The single-seed table that stood "
    "here was withdrawn (its run is gone): docs/notebook/2026-11-28-report-rebuild.md.*"
)


def gains(data: dict[str, Any], env: str) -> Gain | None:
    """The RL gain of ``env`` over the file's seeds, paired state by state."""
    seeds = []
    for seed, envs in sorted(data.get("runs", {}).items(), key=lambda kv: int(kv[0])):
        row = envs.get(env, {})
        if WARM in row and AFTER in row:
            seeds.append(
                seed_gain(seed, row[WARM], row[AFTER], len(row[WARM].get("per_state", [])))
            )
    return pool(seeds) if seeds else None


def _mean(data: dict[str, Any], env: str, policy: str) -> float | None:
    rates = [envs[env][policy]["success_rate"] for envs in data.get("runs", {}).values()
             if policy in envs.get(env, {})]  # fmt: skip
    return sum(rates) / len(rates) if rates else None


def _states(data: dict[str, Any]) -> str:
    counts = {len(envs[env][WARM].get("per_state", []))
              for envs in data.get("runs", {}).values() for env in envs if WARM in envs[env]}  # fmt: skip
    return "/".join(str(c) for c in sorted(counts)) or "?"


def _source(relpath: str, data: dict[str, Any], root: Path) -> str:
    seeds = ", ".join(str(s) for s in data.get("seeds", []))
    return f"From `{relpath}`, seeds {seeds}: {sources.describe(relpath, root)}."


def readme_table(root: Path = sources.ROOT) -> str:
    """The README's table: each policy's success (mean over the seeds) and the RL gain
    pooled over seeds with its 95% interval, from the first demo-seeds file."""
    files = sources.demo_seed_files(root)
    if not files:
        return PLACEHOLDER.format(command=COMMAND, what="table")
    data = sources.load(files[0], root)
    rows = []
    for env in ENVS:
        g = gains(data, env)
        if g is None:
            continue
        cells = [pct(_mean(data, env, p)) for p in ("random", WARM, AFTER, "oracle")]
        rows.append([LABELS[env], *cells, g.text(), g.seeds_text()])
    head = ["env", "random", "warm start", "after RL", "oracle", "RL gain, 95% interval (points)",
            "seeds whose own gain is beyond noise"]  # fmt: skip
    table = markdown_table(head, rows)
    note = (f"Success on {_states(data)} held-out states per cell (mean over the seeds) at "
            "temperature 0.5. " + _source(files[0], data, root))  # fmt: skip
    return f"{table}\n\n{note}"


def results_tables(root: Path = sources.ROOT) -> str:
    """RESULTS' demo section: per file, every (env, seed) with its own paired gain, then
    the seeds pooled (stratified bootstrap; the seed-level t interval beside it)."""
    files = sources.demo_seed_files(root)
    if not files:
        return PLACEHOLDER.format(command=COMMAND, what="section")
    parts = []
    for rel in files:
        data = sources.load(rel, root)
        rows = []
        for env in ENVS:
            g = gains(data, env)
            if g is None:
                continue
            for s in g.seeds:
                row = data["runs"][s.seed][env]
                rows.append([LABELS[env], s.seed, str(s.n),
                             *(pct(row.get(p, {}).get("success_rate")) for p in ("random", WARM, AFTER, "oracle")),
                             pool([s]).text(), "yes" if s.beyond_noise else "no"])  # fmt: skip
            rows.append(
                [
                    LABELS[env],
                    f"pooled ({len(g.seeds)})",
                    "",
                    "",
                    "",
                    "",
                    "",
                    g.text(),
                    g.seeds_text(),
                ]
            )
        wall = data.get("wall_seconds", {})
        minutes = ", ".join(f"seed {s} {float(v) / 60:.1f} min" for s, v in sorted(wall.items()))
        head = ["env", "seed", "states", "random", "warm start", "after RL", "oracle",
                "RL gain, 95% interval (points)", "beyond noise"]  # fmt: skip
        lines = [f"**`{data.get('label', Path(rel).stem)}`**: " + _source(rel, data, root), "",
                 markdown_table(head, rows)]  # fmt: skip
        if minutes:
            lines += ["", f"Wall time of each seed's demo (`wall_seconds`): {minutes}."]
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def wall_time(root: Path = sources.ROOT) -> str:
    """An inline phrase: the demo's wall time per seed, from the first demo-seeds file
    (``default``: the demo as ``make demo`` runs it; a variant's flags change its pace)."""
    files = sources.demo_seed_files(root)[:1]
    minutes = sorted(
        float(v) / 60 for f in files for v in sources.load(f, root).get("wall_seconds", {}).values()
    )
    if not minutes:
        return "in a wall time not yet measured over seeds (`python -m experiments.demo_seeds.run`)"
    where = ", ".join(f"`{f}`" for f in files)
    if round(minutes[0]) == round(minutes[-1]):
        span = f"in about {minutes[0]:.0f} minutes"
    else:
        span = f"in {minutes[0]:.0f} to {minutes[-1]:.0f} minutes"
    runs = f"{len(minutes)} timed run{'s' if len(minutes) > 1 else ''}"
    return f"{span} ({runs}: {where})"


PROBE = "experiments/demo_seeds/probes/sokoban_steps.json"


def sokoban_steps(root: Path = sources.ROOT) -> str:
    """The demo's Sokoban runs resumed past their last step: each seed's paired gain over
    its warm start at every checkpoint evaluated (``probes/sokoban_steps.json``)."""
    data = sources.load(PROBE, root)
    steps = sorted({k for s in data["seeds"].values() for k in s["after RL by step"]}, key=int)
    rows, states = [], set()
    for seed, cell in sorted(data["seeds"].items(), key=lambda kv: int(kv[0])):
        warm = cell[WARM]
        states.add(len(warm["per_state"]))
        by_step = cell["after RL by step"]
        gains_by_step = [
            pool([seed_gain(seed, warm, by_step[k], 0)]).text(method=False) if k in by_step else ""
            for k in steps
        ]
        rows.append([seed, pct(warm["success_rate"]), *gains_by_step])
    head = ["seed", "warm start", *(f"gain at step {k}" for k in steps)]
    note = (f"Paired over {'/'.join(map(str, sorted(states)))} held-out states, 95% bootstrap "
            f"intervals. From `{PROBE}`: {sources.describe(PROBE, root)}.")  # fmt: skip
    return f"{markdown_table(head, rows)}\n\n{note}"


EXTRA_EPOCHS = "experiments/demo_seeds/probes/sokoban_extra_epochs.json"


def sokoban_extra_epochs(root: Path = sources.ROOT) -> str:
    """A Sokoban warm start stuck on the SFT loss plateau, trained 0, 1 and 2 more epochs:
    each arm's training reply accuracy, warm start and paired RL gain
    (``probes/sokoban_extra_epochs.json``)."""
    data = sources.load(EXTRA_EPOCHS, root)
    rows, states = [], set()
    for name, arm in data["arms"].items():
        states.add(len(arm[WARM]["per_state"]))
        gain = pool([seed_gain(name, arm[WARM], arm[AFTER], 0)]).text(method=False)
        accuracy = arm["fit"].get("train_reply_accuracy")
        shown = f"{accuracy:.2f}" if accuracy is not None else "?"
        rows.append([name, shown, pct(arm[WARM]["success_rate"]), pct(arm[AFTER]["success_rate"]), gain])  # fmt: skip
    head = ["Sokoban warm start", "training reply accuracy", "warm start", "after RL", "RL gain"]
    note = (f"Seed 0 at `--micro-token-budget 4096`; paired over {'/'.join(map(str, sorted(states)))} "
            f"held-out states, 95% bootstrap intervals. From `{EXTRA_EPOCHS}`: "
            f"{sources.describe(EXTRA_EPOCHS, root)}.")  # fmt: skip
    return f"{markdown_table(head, rows)}\n\n{note}"


def fit_floor(root: Path = sources.ROOT) -> str:
    """An inline phrase: which Sokoban warm starts of the demo-over-seeds files the fit
    floor (``SFTConfig.end_fit_min_reply_accuracy``) gave extra epochs, and where the
    others ended (each run's ``sft_fit``, from its ``sft_metrics.jsonl``)."""
    fired, passed = [], []
    for relpath in sources.demo_seed_files(root):
        data = sources.load(relpath, root)
        label = Path(relpath).stem
        for seed, envs in sorted(data.get("runs", {}).items(), key=lambda kv: int(kv[0])):
            row = envs.get("sokoban", {})
            fit = row.get("sft_fit")
            if not fit:
                continue
            if fit.get("extra_epochs"):
                before = fit["extra_epochs"]["train_reply_accuracy"]
                gain = pool([seed_gain(seed, row[WARM], row[AFTER], 0)]).text(method=False)
                fired.append(
                    f"`{label}` seed {seed} (training reply accuracy {before:.2f} after its "
                    f"scheduled epochs, {fit['train_reply_accuracy']:.2f} after "
                    f"{fit['extra_epochs']['epochs']} more; warm start "
                    f"{pct(row[WARM]['success_rate'])}, RL {gain})"
                )
            else:
                passed.append(f"{fit['train_reply_accuracy']:.2f} (`{label}` seed {seed})")
    total = len(fired) + len(passed)
    if not total:
        return "not recorded in these results files (`sft_fit`: runs before the fit floor)"
    head = f"the fit floor gave {len(fired)} of {total} Sokoban warm starts extra epochs"
    return (head + (": " + "; ".join(fired) if fired else "")
            + ("; the others ended at " + ", ".join(passed) if passed else ""))  # fmt: skip

"""The sections of a run's overview page, as HTML.

* :func:`events_section`: collapse warnings and rollbacks, each on one row: the signal,
  its value against the threshold, the action, and for a rollback the checkpoint it
  restored, the change it announced, the rates the optimizers hold after it, and the
  abandoned branch.
* :func:`curves_section`: the training curves, with every event marked and the branches
  a rollback abandoned drawn faded.
* :func:`collapse_section`: each echo-trap signal's diagnostic against its threshold
  (from the run's ``trainer.collapse``) and its neutral level; the reasoning's mutual
  information (per thought and per token) against its bound H(prompts) and 0 (no
  dependence on the prompt); the retrieval accuracy against chance (1/K); the
  learning rate.
* :func:`validation_section`, :func:`reasoning_section`, :func:`steps_section`.
"""

from __future__ import annotations

import html
import math
from typing import Any

from ragen.trainer.collapse import SIGNALS, CollapseConfig

from . import charts
from .charts import Line, Ref
from .load import Run, StepFile, finite


def esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


#: (title, metric keys) of the curves; charts without data are left out
CURVES: list[tuple[str, list[str]]] = [
    ("success rate", ["rollout/success_rate", "val/success_rate"]),
    ("reward", ["rollout/reward_mean", "val/reward_mean"]),
    ("in-group reward std", ["rollout/group_reward_std"]),
    ("entropy", ["actor/entropy"]),
    ("grad norm", ["actor/grad_norm_max", "actor/grad_norm_mean"]),
    ("response length (tokens)", ["rollout/response_length", "val/response_length"]),
    ("StarPO-S kept groups", ["filter/kept_group_frac"]),
    ("format error rate", ["rollout/format_error_rate", "val/format_error_rate"]),
]
#: reasoning/* keys the collapse section draws (the others are curves)
_COLLAPSE_REASONING = (
    "reasoning/mutual_info",
    "reasoning/mutual_info_token",
    "reasoning/mutual_info_max",
    "reasoning/retrieval_acc",
)


def fmt(v: Any, pct: bool = False) -> str:
    v = finite(v)
    if v is None:
        return "—"
    return f"{100 * v:.1f}%" if pct else f"{v:.4g}"


def _keys(rows: list[dict[str, Any]]) -> list[str]:
    keys: dict[str, None] = {}
    for r in rows:
        keys.update(dict.fromkeys(r))
    return list(keys)


def lines_for(run: Run, keys: list[str], labels: dict[str, str] | None = None) -> list[Line]:
    """A line per key over the run's rows, plus each abandoned branch's line faded
    (joined to the run's line at the step the branch left it)."""
    out = []
    by_step = {int(r["step"]): r for r in run.metrics}
    for key in keys:
        label = (labels or {}).get(key, key)
        out.append(Line(label, charts.series(run.metrics, key), key=key))
        for b in run.branches:
            pts = charts.series(b.metrics, key)
            if not pts:
                continue
            start = by_step.get(int(pts[0][0]) - 1, {}).get(key)
            if finite(start) is not None:
                pts = [(pts[0][0] - 1, float(start)), *pts]
            out.append(Line(label, pts, key=key, style="faded", branch=b.name))
    return out


# --------------------------------------------------------------------------- events
def _branch_for(run: Run, event: dict[str, Any], used: set[str]) -> str:
    """The abandoned branch a rollback event left: the first unused one starting right
    after the restored step."""
    for b in run.branches:
        if b.name not in used and b.first_step == int(event.get("step", -1)) + 1:
            used.add(b.name)
            return b.name
    return ""


def _threshold(run: Run, signal: str) -> float | None:
    if signal not in SIGNALS:
        return None
    attr = SIGNALS[signal][2]
    cfg = (run.config.get("trainer") or {}).get("collapse") if run.config else None
    value = cfg.get(attr) if isinstance(cfg, dict) else None
    return finite(value) if finite(value) is not None else float(getattr(CollapseConfig(), attr))


def events_section(run: Run, branch_pages: dict[str, str]) -> str:
    """The table of collapse warnings and rollbacks (empty when the run has none)."""
    if not run.events:
        return ""
    by_step = {int(r["step"]): r for r in run.metrics}
    rows = []
    used: set[str] = set()
    for e in run.events:
        kind = e.get("event")
        if kind == "rollback":
            branch = _branch_for(run, e, used)
            link = ""
            if branch:
                page = branch_pages.get(branch)
                name = f"superseded/{esc(branch)}"
                link = (
                    f'<br>abandoned branch: <a href="{esc(page)}">{name}</a>'
                    if page
                    else (f"<br>abandoned branch: {name}")
                )
            rows.append(
                f'<tr class="ev-rollback" data-step="{esc(e.get("step"))}">'
                f"<td>{esc(e.get('from_step', '?'))} &rarr; {esc(e.get('step'))}</td>"
                f"<td><b>rollback</b></td><td>{esc(', '.join(map(str, e.get('signals') or [])))}</td>"
                f"<td colspan=2>restored the checkpoint of step {esc(e.get('step'))}</td>"
                f"<td class=change>{esc(charts.rollback_text(e).split('change: ', 1)[-1])}"
                f"{link}</td></tr>"
            )
            continue
        signal = str(e.get("signal", ""))
        diag = by_step.get(int(e.get("step", -1)) if finite(e.get("step")) is not None else -1, {})
        ratio = finite(diag.get(f"collapse/{signal}"))
        threshold = _threshold(run, signal)
        value = (
            f"{fmt(e.get('value'))} (reference {fmt(e.get('reference'))}"
            + (f"; diagnostic {fmt(ratio)}" if ratio is not None else "")
            + ")"
        )
        action = str(e.get("action", ""))
        rows.append(
            f'<tr class="ev-{esc(kind or "event")} action-{esc(action)}" '
            f'data-step="{esc(e.get("step"))}"><td>{esc(e.get("step"))}'
            + (
                f"<br><span class=small>abandoned branch {esc(e['branch'])}</span>"
                if e.get("branch")
                else ""
            )
            + "</td>"
            f"<td>{esc(kind or '')} warning</td><td><code>{esc(signal)}</code></td>"
            f"<td>{value}</td><td>{fmt(threshold)}</td>"
            f"<td><b>{esc(action)}</b>: {esc(e.get('message', ''))}</td></tr>"
        )
    return (
        "<h2>Collapse warnings and rollbacks</h2><table id=events><tr><th>step</th>"
        "<th>event</th><th>signal</th><th>value</th><th>threshold</th>"
        f"<th>action / change applied</th></tr>{''.join(rows)}</table>"
    )


# --------------------------------------------------------------------------- curves
def curves_section(run: Run) -> str:
    keys = _keys(run.metrics)
    spec = [(t, [k for k in ks if k in keys]) for t, ks in CURVES]
    rewards = [k for k in keys if k.startswith("reward/")]
    if rewards:
        spec.append(("reasoning rewards", rewards))
    spec += [(k, [k]) for k in keys if k.startswith("reasoning/") and k not in _COLLAPSE_REASONING]
    panels = [
        charts.panel(title, lines_for(run, ks), run.events) for title, ks in spec if _has(run, ks)
    ]
    return f"<h2>Curves</h2><div class=panels id=curves>{''.join(panels)}</div>" if panels else ""


def _has(run: Run, keys: list[str]) -> bool:
    return any(charts.series(run.metrics, k) for k in keys)


def collapse_section(run: Run) -> str:
    """Signals against thresholds (module docstring); empty when none was logged."""
    cfg = (run.config.get("trainer") or {}).get("collapse") if run.config else None
    cfg = cfg if isinstance(cfg, dict) else {}
    defaults = CollapseConfig()
    enabled = cfg.get("signals", defaults.signals)
    window = cfg.get("window", defaults.window)
    history = cfg.get("grad_norm_history", defaults.grad_norm_history)
    rollbacks = [e for e in run.events if e.get("event") == "rollback"]
    panels = []
    for name, (key, kind, _) in SIGNALS.items():
        diag = f"collapse/{name}"
        if not _has(run, [diag]):
            continue
        t = _threshold(run, name)
        state = "on" if isinstance(enabled, list) and name in enabled else "off in this run"
        events = [e for e in run.events if e.get("signal") == name] + rollbacks
        if kind == "drop":
            title = f"{name}: {window}-step mean / its peak"
            refs = [Ref(t, f"fires below {t:g}"), Ref(1.0, "at its peak", "chance")]
        elif kind == "spike":
            title = f"{name}: value / median of {history} steps"
            refs = [Ref(t, f"fires above {t:g}x"), Ref(1.0, "typical (1x)", "chance")]
        else:
            title = f"{name}: rise of the {window}-step mean"
            refs = [Ref(t, f"fires above +{t:g}"), Ref(0.0, "no rise", "chance")]
        panels.append(
            charts.panel(
                title,
                lines_for(run, [diag], {diag: f"collapse/{name}"}),
                events,
                refs,
                note=f"{key} · {state}",
                chart_id=f"collapse-{name}",
            )
        )
    mi = charts.series(run.metrics, "reasoning/mutual_info")
    if mi:
        lines = lines_for(run, ["reasoning/mutual_info", "reasoning/mutual_info_token"])
        bound = charts.series(run.metrics, "reasoning/mutual_info_max")
        if bound:
            # H of the batch's prompt mix (log K for K equal groups): no estimate passes it
            lines.append(
                Line("H(prompts) bound", bound, "reasoning/mutual_info_max", "bound", "#2a9d4b")
            )
        panels.append(
            charts.panel(
                "mutual information of prompt and reasoning (nats)",
                lines,
                run.events,
                [Ref(0.0, "0: reasoning ignores the prompt", "chance")],
                chart_id="collapse-mi",
            )
        )
    acc = charts.series(run.metrics, "reasoning/retrieval_acc")
    if acc:
        lines = lines_for(run, ["reasoning/retrieval_acc"])
        chance = [
            (x, math.exp(-y)) for x, y in charts.series(run.metrics, "reasoning/mutual_info_max")
        ]
        if chance:
            lines.append(Line("chance 1/n", chance, "chance", "chance", "#6b7280"))
        panels.append(
            charts.panel(
                "retrieval accuracy (prompt told from its reasoning)",
                lines,
                run.events,
                chart_id="collapse-retrieval",
            )
        )
    lr_keys = [k for k in ("actor/lr", "critic/lr") if _has(run, [k])]
    if lr_keys and (panels or run.events):
        panels.append(
            charts.panel("learning rate", lines_for(run, lr_keys), run.events, chart_id="lr")
        )
    if not panels:
        return ""
    return (
        "<h2>Collapse signals</h2><p class=small>Each echo-trap signal's diagnostic "
        "(ragen.trainer.collapse) against the threshold this run used (red) and its neutral "
        "level (grey); warnings are dashed lines labelled with their signal, rollbacks "
        "arrows back to the checkpoint they restored; abandoned branches are faded.</p>"
        f"<div class=panels id=collapse>{''.join(panels)}</div>"
    )


# ----------------------------------------------------------------- validation, steps
def validation_section(run: Run, files: list[tuple[StepFile, int, dict]], states: bool) -> str:
    val_rows = [r for r in run.metrics if any(k.startswith("val/") for k in r)]
    if not val_rows:
        return ""
    pages = {sf.step: sf.page for sf, _, _ in files if sf.kind == "val" and not sf.branch}
    cols = [
        ("val/success_rate", "success", True),
        ("val/reward_mean", "reward mean", False),
        ("val/pass_at_k", "pass@k", True),
        ("val/valid_action_rate", "valid actions", True),
        ("val/format_error_rate", "format errors", True),
        ("val/response_length", "response length", False),
    ]
    head = "".join(f"<th>{c[1]}</th>" for c in cols)
    body = ""
    for r in val_rows:
        s = int(r["step"])
        link = f'<a href="{pages[s]}">{s}</a>' if s in pages else str(s)
        body += f"<tr><td>{link}</td>" + "".join(
            f"<td>{fmt(r.get(k), pct)}</td>" for k, _, pct in cols
        )
        body += "</tr>"
    more = (
        '<p><a href="states.html" id=states-link>Each validation state across training</a>: '
        "its success, thought and actions at every validation step, and a diff of the "
        "reasoning between two steps.</p>"
        if states
        else ""
    )
    return (
        f"<h2>Validation</h2>{more}<table id=validation><tr><th>step</th>{head}</tr>{body}</table>"
    )


def steps_section(run: Run, files: list[tuple[StepFile, int, dict]]) -> str:
    """Links to every trajectories page, compact (one chip per file), and the per-file
    table folded away."""
    if not files:
        return ""
    metrics_by_step = {int(r["step"]): r for r in run.metrics}
    groups: dict[str, list[str]] = {}
    rows = ""
    for sf, n, st in files:
        name = (
            "evaluation"
            if sf.kind == "eval"
            else f"abandoned branch {sf.branch}"
            if sf.branch
            else {"train": "training steps", "val": "validation steps"}[sf.kind]
        )
        short = "eval" if sf.kind == "eval" else str(sf.step)
        groups.setdefault(name, []).append(
            f'<a class="chip step-link" data-kind="{sf.kind}" href="{sf.page}" '
            f'title="{esc(sf.label)} · {n} episodes">{short}</a>'
        )
        m = metrics_by_step.get(sf.step, {}) if not sf.branch else {}
        pre = "val/" if sf.kind == "val" else "rollout/"
        success = (
            run.summary.get("success_rate") if sf.kind == "eval" else m.get(f"{pre}success_rate")
        )
        rows += (
            f'<tr><td><a href="{sf.page}">{esc(sf.label)}</a></td><td>{n}</td>'
            f"<td>{fmt(success, True)}</td><td>{fmt(st.get('top_thought_share'), True)}</td>"
            f"<td>{fmt(st.get('mismatch_rate'), True)}</td></tr>"
        )
    chips = "".join(
        f"<div class=chips><span class=small>{esc(name)}:</span> {''.join(links)}</div>"
        for name, links in groups.items()
    )
    return (
        "<h2>Trajectories</h2><p class=small>Each page shows a step's episodes grouped by "
        'initial state; <a href="search.html">search</a> finds a text in all of them.</p>'
        f"<div id=steps>{chips}</div><details><summary>per-file table</summary>"
        "<table id=steps-table><tr><th>trajectories</th><th>episodes</th><th>success</th>"
        "<th>top thought share</th><th>thought/answer mismatch</th></tr>"
        f"{rows}</table></details>"
    )


def reasoning_section(reasoning: dict[int, dict[str, float]], run: Run) -> str:
    """Thought statistics per logged step (charts, table) and the thoughts picker."""
    steps = sorted(reasoning)
    if not steps:
        return ""
    rows = [{"step": s, **{f"thoughts/{k}": v for k, v in reasoning[s].items()}} for s in steps]
    chart = ""
    if len(steps) > 1:
        spec = [
            ("top thought share (actions masked)", "thoughts/top_thought_share"),
            ("distinct-2 of thoughts", "thoughts/distinct_2"),
            ("mean thought length (words)", "thoughts/thought_words"),
            ("thought/answer mismatch rate", "thoughts/mismatch_rate"),
        ]
        chart = (
            "<div class=panels>"
            + "".join(
                charts.panel(title, [Line(key, charts.series(rows, key), key=key)], run.events)
                for title, key in spec
            )
            + "</div>"
        )
    body = "".join(
        f"<tr><td>{s}</td><td>{fmt(reasoning[s]['top_thought_share'], True)}</td>"
        f"<td>{fmt(reasoning[s]['distinct_2'])}</td><td>{fmt(reasoning[s]['thought_words'])}</td>"
        f"<td>{fmt(reasoning[s]['mismatch_rate'], True)}</td></tr>"
        for s in steps
    )
    table = (
        "<details><summary>per-step table</summary><table id=reasoning><tr><th>step</th>"
        "<th>top thought share</th><th>distinct-2</th><th>thought words</th>"
        f"<th>mismatch rate</th></tr>{body}</table></details>"
    )
    return (
        "<h2>Reasoning over training</h2><p class=small>From the logged trajectories: the "
        "share of the most common thought once action words are masked, distinct word "
        "bigrams, mean thought length and the share of judged turns whose thought commits "
        "to other actions than the answer (ragen.viewer.reasoning_stats).</p>"
        + chart
        + table
        + "<h3>Thoughts over training</h3><p class=small>Pick any logged steps; each column "
        "shows distinct thoughts of that step, linked to their episodes.</p>"
        "<div id=thoughts-app><p class=small>(needs JavaScript)</p></div>"
    )

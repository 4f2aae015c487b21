"""Write the static site: an overview page per run and one page per trajectories file.

Layout of ``OUT`` (a single run; a folder of runs gets ``OUT/index.html`` listing them
and one such tree per run under ``OUT/<run name>/``)::

    index.html                 overview: config, curves, collapse events, validation
                               table, steps, reasoning over training
    step_000012.html           step browser; #ep=N shows episode N turn by turn
    val_step_000010.html, eval.html
    data/step_000012.js        that page's episodes (window.RAGEN_STEP)
    data/tiles.js              the env's picture tiles (window.RAGEN_TILES), if any
    assets/viewer.css, viewer.js   (once, at OUT)

Everything is plain files: the site opens from ``file://`` with no network. A page's
data is a ``<script src>`` (Chromium forbids ``fetch()`` of local files); no file holds
more than one step.
"""

from __future__ import annotations

import html
import json
import os
import shutil
from pathlib import Path
from typing import Any

from . import charts
from .load import Collection, Run, StepFile, finite, load, read_episodes
from .reasoning_stats import mismatches, sample_thoughts, step_stats

ASSETS = Path(__file__).resolve().parent / "assets"
_FALLBACK_ACTIONS = ["up", "down", "left", "right"]


def esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def page(title: str, root: str, body: str, nav: str = "", scripts: tuple[str, ...] = ()) -> str:
    tags = "".join(f'<script src="{esc(s)}"></script>' for s in scripts)
    return (
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8>"
        f"<title>{esc(title)}</title>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f'<link rel=stylesheet href="{root}assets/viewer.css"></head>\n<body>'
        f"<header><span class=title>ragen view</span>{nav}</header>\n<main>{body}</main>{tags}"
        "</body></html>\n"
    )


def action_names(run: Run, episodes: list[dict]) -> list[str]:
    """The env's action vocabulary, else the actions seen in ``episodes``."""
    try:
        from ragen import envs

        env = envs.make(run.env_name, **run.env_config)
        names = env.action_names
        env.close()
        if names:
            return [str(n) for n in names]
    except Exception:
        pass
    seen = {a.lower() for ep in episodes[:50] for t in ep.get("turns") or () for a in t["actions"]}
    return sorted(seen) or _FALLBACK_ACTIONS


# -------------------------------------------------------------------------- step data
def compact(i: int, ep: dict[str, Any], verdicts: list[bool | None]) -> dict[str, Any]:
    """The fields of one episode record the step page shows, with short keys
    (``verdicts``: the thought/answer mismatch of each turn, ``reasoning_stats.mismatches``)."""
    turns = []
    advantages = ep.get("advantages") or []
    mismatches = 0
    for k, t in enumerate(ep.get("turns") or ()):
        info = t.get("info") or {}
        obs = str(t.get("observation", ""))
        prompt = str(t.get("prompt") or "")
        mm = verdicts[k] if k < len(verdicts) else None
        mismatches += bool(mm)
        turns.append(
            {
                "o": obs,
                "p": prompt.replace(obs, "\u0000") if obs and prompt else prompt,
                "rs": t.get("response", ""),
                "th": t.get("thought", ""),
                "a": list(t.get("actions") or []),
                "x": list(t.get("executed_actions") or []),
                "v": list(info.get("action_is_valid") or []),
                "ef": list(info.get("action_is_effective") or []),
                "er": finite(t.get("env_reward")),
                "rw": finite(t.get("reward")),
                "f": bool(t.get("format_ok", True)),
                "fx": info.get("format_error", ""),
                "sc": info.get("reasoning_scores") or None,
                "rr": finite(info.get("reasoning_reward")) or 0.0,
                "adv": finite(advantages[k]) if k < len(advantages) else None,
                "d": bool(t.get("done", False)),
                "mm": mm,
            }
        )
    kept = ep.get("kept")
    return {
        "i": i,
        "g": ep.get("group_id", 0),
        "e": ep.get("episode_id", i),
        "s": ep.get("seed", 0),
        "env": ep.get("env_name", ""),
        "ok": bool(ep.get("success", False)),
        "r": finite(ep.get("episode_reward")) or 0.0,
        "n": len(turns),
        "end": ep.get("end_reason", ""),
        "k": None if kept is None else bool(kept),
        "fe": sum(not t["f"] for t in turns),
        "mm": mismatches,
        "src": ep.get("source", ""),
        "t": turns,
    }


def _js(name: str, payload: Any) -> str:
    return (
        f"window.{name} = " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")) + ";\n"
    )


# -------------------------------------------------------------------------- run pages
def build_run(run: Run, out: Path, root: str, top: str = "") -> dict[str, Any]:
    """Write one run's pages into ``out`` (``root``: relative path to the site root).
    Returns a summary for the collection index."""
    from .pictures import tile_palette

    out.mkdir(parents=True, exist_ok=True)
    (out / "data").mkdir(exist_ok=True)
    title = run.name or run.path.name
    palette = tile_palette(run.env_name, run.env_config)
    scripts_tiles = ()
    if palette is not None:
        (out / "data" / "tiles.js").write_text(_js("RAGEN_TILES", palette), encoding="utf-8")
        scripts_tiles = ("data/tiles.js",)
    nav = (
        f'<a href="{top}index.html">all runs</a>' if top else ""
    ) + '<a href="index.html">overview</a>'
    names = action_names(run, read_episodes(run.files[0].path)[:50]) if run.files else []
    jobs = [
        (sf, out, root, nav, title, names, scripts_tiles, _step_picker(run, sf)) for sf in run.files
    ]
    reasoning: dict[int, dict[str, float]] = {}
    samples: dict[int, list[str]] = {}
    file_stats: list[tuple[StepFile, int, dict]] = []
    for sf, n, stats, thoughts in _map(_build_step, jobs):
        if sf.kind in ("train", "eval"):
            reasoning[sf.step] = stats
            samples[sf.step] = thoughts
        file_stats.append((sf, n, stats))
    overview = _overview(run, title, file_stats, reasoning, samples)
    (out / "index.html").write_text(page(title, root, overview, nav), encoding="utf-8")
    last = run.metrics[-1] if run.metrics else run.summary
    return {
        "name": title,
        "kind": run.kind,
        "env": run.env_name,
        "steps": len(run.metrics),
        "files": len(run.files),
        "success": _last(run, "val/success_rate") or finite(last.get("success_rate")),
        "events": len(run.events),
    }


def _build_step(job) -> tuple[StepFile, int, dict[str, float], list[str]]:
    """Write one trajectories file's data and page; return its statistics."""
    sf, out, root, nav, title, names, scripts_tiles, picker = job
    episodes = read_episodes(sf.path)
    verdicts = mismatches(episodes, names)
    stats = step_stats(episodes, names, verdicts)
    data = {
        "title": f"{title} · {sf.label}",
        "label": sf.label,
        "kind": sf.kind,
        "step": sf.step,
        "filtered": any(ep.get("kept") is not None for ep in episodes),
        "episodes": [compact(i, ep, verdicts[i]) for i, ep in enumerate(episodes)],
    }
    stem = sf.page[: -len(".html")]
    (out / "data" / f"{stem}.js").write_text(_js("RAGEN_STEP", data), encoding="utf-8")
    body = f"<h1>{esc(title)} · {esc(sf.label)}</h1>{picker}<div id=app></div>"
    scripts = (*scripts_tiles, f"data/{stem}.js", f"{root}assets/viewer.js")
    (out / sf.page).write_text(page(data["title"], root, body, nav, scripts), encoding="utf-8")
    return sf, len(episodes), stats, sample_thoughts(episodes, 6)


def _map(fn, jobs: list) -> list:
    """``[fn(j) for j in jobs]``, on up to 4 worker processes when there are many."""
    workers = min(4, os.cpu_count() or 1, len(jobs) // 8)
    if workers < 2:
        return [fn(j) for j in jobs]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("fork" if hasattr(os, "fork") else "spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        return list(pool.map(fn, jobs, chunksize=4))


def _last(run: Run, key: str) -> float | None:
    for row in reversed(run.metrics):
        v = finite(row.get(key))
        if v is not None:
            return v
    return None


def _step_picker(run: Run, current: StepFile) -> str:
    if len(run.files) < 2:
        return ""
    options = "".join(
        f'<option value="{esc(sf.page)}"{" selected" if sf is current else ""}>'
        f"{esc(sf.label)}</option>"
        for sf in run.files
    )
    return (
        "<p class=small>go to <select id=step-picker "
        'onchange="location.href=this.value">' + options + "</select></p>"
    )


def _fmt(v: Any, pct: bool = False) -> str:
    v = finite(v)
    if v is None:
        return "—"
    return f"{100 * v:.1f}%" if pct else f"{v:.4g}"


def _overview(run, title, file_stats, reasoning, samples) -> str:
    parts = [f"<h1>{esc(title)}</h1>"]
    parts.append(
        f"<p class=small>{'training run' if run.kind == 'train' else 'eval output'} "
        f"· {esc(run.path)} · env {esc(run.env_name or '?')}</p>"
    )
    if run.events:
        items = "".join(
            f"<li><b>step {esc(e.get('step'))}</b> {esc(e.get('event', ''))} "
            f"<code>{esc(e.get('signal', ''))}</code> ({esc(e.get('action', ''))}): "
            f"{esc(e.get('message', ''))}</li>"
            for e in run.events
        )
        parts.append(f"<h2>Collapse warnings</h2><ul class=events id=events>{items}</ul>")
    if run.metrics:
        parts.append("<h2>Curves</h2>" + charts.panels(run.metrics, run.events))
    if run.summary:
        rows = "".join(
            f"<tr><th>{esc(k)}</th><td>{_fmt(v)}</td></tr>" for k, v in sorted(run.summary.items())
        )
        parts.append(f"<h2>Metrics</h2><table id=summary>{rows}</table>")
    val_rows = [r for r in run.metrics if any(k.startswith("val/") for k in r)]
    if val_rows:
        pages = {sf.step: sf.page for sf, _, _ in file_stats if sf.kind == "val"}
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
                f"<td>{_fmt(r.get(k), pct)}</td>" for k, _, pct in cols
            )
            body += "</tr>"
        parts.append(
            f"<h2>Validation</h2><table id=validation><tr><th>step</th>{head}</tr>{body}</table>"
        )
    if file_stats:
        metrics_by_step = {int(r["step"]): r for r in run.metrics}
        rows = ""
        for sf, n, st in file_stats:
            m = metrics_by_step.get(sf.step, {})
            pre = "val/" if sf.kind == "val" else "rollout/"
            success = (
                run.summary.get("success_rate")
                if sf.kind == "eval"
                else m.get(f"{pre}success_rate")
            )
            rows += (
                f'<tr><td><a class=step-link data-kind="{sf.kind}" href="{sf.page}">'
                f"{esc(sf.label)}</a></td><td>{n}</td><td>{_fmt(success, True)}</td>"
                f"<td>{_fmt(st['top_thought_share'], True)}</td>"
                f"<td>{_fmt(st['mismatch_rate'], True)}</td></tr>"
            )
        parts.append(
            "<h2>Steps</h2><p class=small>Each page shows the step's episodes grouped by "
            "initial state; click one to see it turn by turn.</p><table id=steps><tr>"
            "<th>trajectories</th><th>episodes</th><th>success</th><th>top thought share</th>"
            f"<th>thought/answer mismatch</th></tr>{rows}</table>"
        )
    if reasoning:
        parts.append(_reasoning_section(reasoning, samples, run.events))
    if run.config_text:
        parts.append(
            "<h2>Config</h2><details><summary>show</summary>"
            f"<pre id=config>{esc(run.config_text)}</pre></details>"
        )
    return "".join(parts)


def _reasoning_section(reasoning, samples, events) -> str:
    steps = sorted(reasoning)
    rows = [{"step": s, **{f"thoughts/{k}": v for k, v in reasoning[s].items()}} for s in steps]
    chart = ""
    if len(steps) > 1:
        chart = charts.panels(
            rows,
            events,
            spec=[
                ("top thought share (actions masked)", ["thoughts/top_thought_share"]),
                ("distinct-2 of thoughts", ["thoughts/distinct_2"]),
                ("mean thought length (words)", ["thoughts/thought_words"]),
                ("thought/answer mismatch rate", ["thoughts/mismatch_rate"]),
            ],
        )
    body = "".join(
        f"<tr><td>{s}</td><td>{_fmt(reasoning[s]['top_thought_share'], True)}</td>"
        f"<td>{_fmt(reasoning[s]['distinct_2'])}</td><td>{_fmt(reasoning[s]['thought_words'])}</td>"
        f"<td>{_fmt(reasoning[s]['mismatch_rate'], True)}</td></tr>"
        for s in steps
    )
    table = (
        "<details><summary>per-step table</summary><table id=reasoning><tr><th>step</th>"
        "<th>top thought share</th><th>distinct-2</th><th>thought words</th>"
        f"<th>mismatch rate</th></tr>{body}</table></details>"
    )
    early, late = steps[0], steps[-1]

    def column(s: int) -> str:
        items = (
            "".join(f"<pre>{esc(t)}</pre>" for t in samples.get(s, [])) or "<p>(no thoughts)</p>"
        )
        return f"<div><h3>step {s}</h3>{items}</div>"

    side = (
        f"<div class=thoughts>{column(early)}{column(late)}</div>"
        if early != late
        else column(early)
    )
    return (
        "<h2>Reasoning over training</h2><p class=small>From the logged trajectories: the "
        "share of the most common thought once action words are masked, distinct word "
        "bigrams, mean thought length and the share of judged turns whose thought commits "
        "to other actions than the answer (ragen.viewer.reasoning_stats).</p>"
        + chart
        + table
        + "<h3>Thoughts, early and late</h3>"
        + side
    )


# -------------------------------------------------------------------------- the site
def build_site(path: str | Path, out: str | Path | None = None) -> Path:
    """Build the site for the run folder ``path`` into ``out`` (default ``path/site``);
    return the path of its ``index.html``."""
    collection: Collection = load(path)
    out = Path(out) if out is not None else collection.path / "site"
    out.mkdir(parents=True, exist_ok=True)
    (out / "assets").mkdir(exist_ok=True)
    for name in ("viewer.css", "viewer.js"):
        shutil.copyfile(ASSETS / name, out / "assets" / name)
    if len(collection.runs) == 1 and collection.runs[0].name == "":
        build_run(collection.runs[0], out, "")
        return out / "index.html"
    summaries = []
    for run in collection.runs:
        depth = len(Path(run.name).parts)
        root = "../" * depth
        summary = build_run(run, out / run.name, root, top=root)
        summary["href"] = f"{run.name}/index.html"
        summaries.append(summary)
    rows = "".join(
        f'<tr><td><a class=run-link href="{esc(s["href"])}">{esc(s["name"])}</a></td>'
        f"<td>{esc(s['kind'])}</td><td>{esc(s['env'])}</td><td>{s['steps']}</td>"
        f"<td>{s['files']}</td><td>{_fmt(s['success'], True)}</td><td>{s['events']}</td></tr>"
        for s in summaries
    )
    body = (
        f"<h1>{esc(collection.path.name)}</h1><h2>Runs</h2><table id=runs><tr><th>run</th>"
        "<th>kind</th><th>env</th><th>steps</th><th>trajectory files</th>"
        f"<th>success (last validation)</th><th>collapse events</th></tr>{rows}</table>"
    )
    if collection.results:
        body += _results_table(collection.results)
    (out / "index.html").write_text(page(collection.path.name, "", body), encoding="utf-8")
    return out / "index.html"


def _results_table(results: dict[str, Any]) -> str:
    columns = sorted({c for row in results.values() if isinstance(row, dict) for c in row})
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = ""
    for env, row in results.items():
        if not isinstance(row, dict):
            continue
        cells = "".join(
            f"<td>{_fmt((row.get(c) or {}).get('success_rate'), True)}</td>" for c in columns
        )
        body += f"<tr><td>{esc(env)}</td>{cells}</tr>"
    return (
        "<h2>Results (success rate, held-out seeds)</h2>"
        f"<table id=results><tr><th>env</th>{head}</tr>{body}</table>"
    )


__all__ = ["build_site", "build_run", "compact"]

"""Write the static site: an overview page per run, a page per trajectories file, a
search page and a page of the validation states across training.

Layout of ``OUT`` (a single run; a folder of runs gets ``OUT/index.html`` listing them
and one such tree per run under ``OUT/<run name>/``)::

    index.html                  overview: events, curves, collapse signals, validation,
                                reasoning over training, links to every trajectories page
    step_000012.html            step browser; #ep=N shows episode N turn by turn, and the
                                filters and search live in the URL (#q=box&outcome=failure)
    val_step_000010.html, eval.html, branch-<name>-step_000004.html (abandoned branch)
    search.html                 text search over every trajectories file
    states.html                 each validation state across the validation steps
    data/step_000012.js         that page's episode index; data/step_000012.c0.js ... its
                                episodes' turns, CHUNK episodes a file, loaded on demand
    data/files.js, thoughts.js, states.js, tiles.js
    assets/viewer.css, *.js     (once, at OUT)

Everything is plain files: the site opens from ``file://`` with no network. The data
files are compressed (:mod:`ragen.viewer.data`); no file holds more than one step.
"""

from __future__ import annotations

import html
import multiprocessing
import os
import shutil
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragen import envs
from ragen.errors import UsageError

from . import overview
from .data import CHUNK, Reading, episode_entry, text_of, write_data, write_lines
from .load import Collection, Run, StepFile, finite, load, read_episode_lines, read_episodes
from .overview import fmt
from .pictures import tile_palette
from .reasoning_stats import mismatches, step_stats

ASSETS = Path(__file__).resolve().parent / "assets"
SCRIPTS = ("common.js", "step.js", "search.js", "states.js", "overview.js")
_FALLBACK_ACTIONS = ["up", "down", "left", "right"]
#: what a record with a field of the wrong type raises while it is read
_DAMAGE = (TypeError, ValueError, AttributeError, KeyError)
#: distinct thoughts kept per step for "thoughts over training"
THOUGHT_SAMPLES = 24


def esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def page(
    title: str,
    root: str,
    body: str,
    nav: str = "",
    scripts: tuple[str, ...] = (),
    kind: str = "",
    stem: str = "",
    tiles: bool = False,
) -> str:
    """One HTML page; ``kind`` and ``stem`` tell its script what to show, ``tiles``
    that the run has picture tiles (``data/tiles.js``)."""
    tags = "".join(f'<script src="{esc(s)}"></script>' for s in scripts)
    return (
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8>"
        f"<title>{esc(title)}</title>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f'<link rel=stylesheet href="{root}assets/viewer.css"></head>\n'
        f'<body data-page="{esc(kind)}" data-stem="{esc(stem)}" data-tiles="{int(tiles)}">'
        f"<header><span class=title>ragen view</span>{nav}</header>\n<main>{body}</main>{tags}"
        "</body></html>\n"
    )


def action_names(run: Run, episodes: list[dict]) -> list[str]:
    """The env's action vocabulary, else the actions seen in ``episodes``."""
    try:
        env = envs.make(run.env_name, **run.env_config)
        names = env.action_names
        env.close()
        if names:
            return [str(n) for n in names]
    except Exception:  # an env the viewer cannot build: the actions the episodes name
        pass
    seen = {
        str(a).lower()
        for ep in episodes[:50]
        for t in ep.get("turns") or ()
        for a in (t.get("actions") if isinstance(t.get("actions"), list) else ())
    }
    return sorted(seen) or _FALLBACK_ACTIONS


# -------------------------------------------------------------------------- step pages
@dataclass
class StepJob:
    sf: StepFile
    out: Path
    root: str
    nav: str
    title: str
    names: list[str]
    reading: Reading
    tiles: bool
    picker: str
    display: str  # the file's path as the skip messages name it


@dataclass
class StepResult:
    sf: StepFile
    episodes: int
    stats: dict[str, float]
    thoughts: list[list[Any]]  # [thought, episode index]
    states: list[dict[str, Any]]  # validation files: one cell per episode
    skipped: list[str] = field(default_factory=list)


def _build_step(job: StepJob) -> StepResult:
    """Write one trajectories file's data and page; return its statistics."""
    sf = job.sf
    skipped: list[str] = []
    pairs = read_episode_lines(sf.path, skipped, job.display)
    lines, episodes, entries = [], [], []
    try:
        verdicts = mismatches([ep for _, ep in pairs], job.names)
        entries = [
            episode_entry(i, ep, verdicts[i], job.reading) for i, (_, ep) in enumerate(pairs)
        ]
        lines, episodes = [raw for raw, _ in pairs], [ep for _, ep in pairs]
    except _DAMAGE:  # some record has a field of the wrong type: find it, keep the rest
        for n, (raw, ep) in enumerate(pairs):
            try:
                v = mismatches([ep], job.names)[0]
                entries.append(episode_entry(len(entries), ep, v, job.reading))
            except _DAMAGE as err:
                skipped.append(
                    f"{job.display}: episode {n + 1} skipped (a field of the wrong type: "
                    f"{type(err).__name__})"
                )
                continue
            lines.append(raw)
            episodes.append(ep)
    if not entries:
        why = "nothing readable left" if skipped else "no episodes"
        skipped.append(f"{job.display}: {why}; no page written")
        return StepResult(sf, 0, {}, [], [], skipped)
    stats = step_stats(episodes, job.names, [e["mv"] for e in entries])
    data = {
        "title": f"{job.title} · {sf.label}",
        "label": sf.label,
        "kind": sf.kind,
        "step": sf.step,
        "filtered": any(e["k"] is not None for e in entries),
        "chunks": (len(entries) + CHUNK - 1) // CHUNK,
        "chunk": CHUNK,
        "episodes": entries,
    }
    folder = job.out / "data"
    write_data(folder, sf.stem, data)
    for k in range(data["chunks"]):
        write_lines(folder, f"{sf.stem}.c{k}", lines[k * CHUNK : (k + 1) * CHUNK])
    body = f"<h1>{esc(job.title)} · {esc(sf.label)}</h1>{job.picker}<div id=app></div>"
    scripts = (f"{job.root}assets/common.js", f"{job.root}assets/step.js")
    (job.out / sf.page).write_text(
        page(data["title"], job.root, body, job.nav, scripts, "step", sf.stem, job.tiles),
        encoding="utf-8",
    )
    states = (
        [_state_cell(i, ep) for i, ep in enumerate(episodes)]
        if sf.kind == "val" and not sf.branch
        else []
    )
    return StepResult(sf, len(entries), stats, _thoughts(episodes), states, skipped)


def _turns(ep: dict[str, Any]) -> list[dict[str, Any]]:
    return ep.get("turns") or []


def _thoughts(episodes: list[dict[str, Any]]) -> list[list[Any]]:
    """Up to THOUGHT_SAMPLES distinct non-empty thoughts, ``[thought, episode index]``,
    in order of first appearance."""
    seen: dict[str, int] = {}
    for i, ep in enumerate(episodes):
        for t in _turns(ep):
            thought = t.get("thought")
            thought = thought.strip() if isinstance(thought, str) else ""
            if thought and thought not in seen:
                seen[thought] = i
                if len(seen) == THOUGHT_SAMPLES:
                    return [[k, v] for k, v in seen.items()]
    return [[k, v] for k, v in seen.items()]


def _state_cell(i: int, ep: dict[str, Any]) -> dict[str, Any]:
    """One validation episode as the states page shows it."""
    return {
        "seed": text_of(ep.get("seed")) or "0",
        "i": i,
        "ok": bool(ep.get("success", False)),
        "r": finite(ep.get("episode_reward")) or 0.0,
        "n": len(_turns(ep)),
        "t": [
            {
                "o": text_of(t.get("observation")),
                "th": text_of(t.get("thought")),
                "a": [text_of(a) for a in t.get("actions") or []]
                if isinstance(t.get("actions"), list)
                else [],
                "f": bool(t.get("format_ok", True)),
                "im": (t.get("info") or {}).get("images", [])[:1]
                if isinstance(t.get("info"), dict)
                else [],
            }
            for t in _turns(ep)
        ],
    }


def _map(fn: Callable, jobs: list) -> list:
    """``[fn(j) for j in jobs]``, on up to 4 worker processes when there are many."""
    workers = min(4, os.cpu_count() or 1, len(jobs) // 8)
    if workers < 2:
        return [fn(j) for j in jobs]

    ctx = multiprocessing.get_context("fork" if hasattr(os, "fork") else "spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        return list(pool.map(fn, jobs, chunksize=2))


# -------------------------------------------------------------------------- run pages
def build_run(run: Run, out: Path, root: str, top: str = "") -> dict[str, Any]:
    """Write one run's pages into ``out`` (``root``: relative path to the site root).
    Returns a summary for the collection index; what was skipped is on ``run.skipped``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "data").mkdir(exist_ok=True)
    title = run.name or run.path.name
    palette = tile_palette(run.env_name, run.env_config)
    if palette is not None:
        write_data(out / "data", "tiles", palette, compress=False)
    tiles = palette is not None
    has_val = any(sf.kind == "val" and not sf.branch for sf in run.files)
    nav = (
        (f'<a href="{top}index.html">all runs</a>' if top else "")
        + '<a href="index.html">overview</a>'
        + ('<a href="search.html">search</a>' if run.files else "")
        + ('<a href="states.html">validation states</a>' if has_val else "")
    )
    sample: list[dict] = []
    for sf in run.files[:1]:
        sample = read_episodes(sf.path)[:50]
    names = action_names(run, sample)
    reading = Reading(run.reasoning, run.separator)
    jobs = [
        StepJob(
            sf,
            out,
            root,
            nav,
            title,
            names,
            reading,
            tiles,
            _step_picker(run, sf),
            _rel(sf.path, run.path),
        )
        for sf in run.files
    ]
    results: list[StepResult] = _map(_build_step, jobs)
    for r in results:
        run.skipped += r.skipped
    built = [r for r in results if r.episodes]
    file_stats = [(r.sf, r.episodes, r.stats) for r in built]
    reasoning = {
        r.sf.step: r.stats for r in built if r.sf.kind in ("train", "eval") and not r.sf.branch
    }
    _write_site_data(out, built)
    branch_pages: dict[str, str] = {}
    for r in built:
        if r.sf.branch:
            branch_pages.setdefault(r.sf.branch, r.sf.page)
    states = any(r.states for r in built)
    common = f"{root}assets/common.js"
    body = _overview(run, title, file_stats, reasoning, states, branch_pages)
    (out / "index.html").write_text(
        page(title, root, body, nav, (common, f"{root}assets/overview.js"), "overview"),
        encoding="utf-8",
    )
    if built:
        search = (
            f"<h1>{esc(title)} · search</h1><p class=small>Finds a text in the thoughts, "
            "answers and observations of every trajectories file of the run, and in the "
            "raw replies (a malformed reply, early in training, has no thought or answer "
            "to search; the toggle leaves them out). Not case sensitive; each hit links "
            "to its turn.</p><div id=app></div>"
        )
        (out / "search.html").write_text(
            page(
                f"{title} · search",
                root,
                search,
                nav,
                (common, f"{root}assets/search.js"),
                "search",
                tiles=tiles,
            ),
            encoding="utf-8",
        )
    if states:
        body = (
            f"<h1>{esc(title)} · validation states across training</h1><p class=small>Every "
            "validation state (initial-state seed) at every validation step: green solved, "
            "red not. Click a state to see its thoughts and actions at each step, and a "
            "diff of the reasoning between two steps.</p><div id=app></div>"
        )
        (out / "states.html").write_text(
            page(
                f"{title} · validation states",
                root,
                body,
                nav,
                (common, f"{root}assets/states.js"),
                "states",
                tiles=tiles,
            ),
            encoding="utf-8",
        )
    last = run.metrics[-1] if run.metrics else run.summary
    return {
        "name": title,
        "kind": run.kind,
        "env": run.env_name,
        "steps": len(run.metrics),
        "files": len(built),
        "success": _last(run, "val/success_rate") or finite(last.get("success_rate")),
        "events": len(run.events),
        "skipped": len(run.skipped),
    }


def _rel(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def _write_site_data(out: Path, built: list[StepResult]) -> None:
    """``files.js`` (what search walks), ``thoughts.js`` and ``states.js``."""
    files = [
        {
            "stem": r.sf.stem,
            "page": r.sf.page,
            "label": r.sf.label,
            "kind": r.sf.kind,
            "step": r.sf.step,
            "branch": r.sf.branch,
            "n": r.episodes,
            "chunks": (r.episodes + CHUNK - 1) // CHUNK,
        }
        for r in built
    ]
    write_data(out / "data", "files", {"files": files})
    thoughts = {
        "steps": [
            {"step": r.sf.step, "label": r.sf.label, "page": r.sf.page, "samples": r.thoughts}
            for r in built
            if r.sf.kind in ("train", "eval") and not r.sf.branch
        ]
    }
    write_data(out / "data", "thoughts", thoughts)
    val = [r for r in built if r.states]
    if val:
        by_seed: dict[str, dict[str, Any]] = {}
        for r in val:
            for cell in r.states:
                seed = str(cell["seed"])
                by_seed.setdefault(seed, {}).setdefault(str(r.sf.step), cell)
        payload = {
            "steps": [r.sf.step for r in val],
            "pages": {str(r.sf.step): r.sf.page for r in val},
            "states": [{"seed": s, "cells": cells} for s, cells in by_seed.items()],
        }
        write_data(out / "data", "states", payload)


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


def skipped_note(skipped: list[str]) -> str:
    if not skipped:
        return ""
    items = "".join(f"<li>{esc(s)}</li>" for s in skipped)
    return (
        f"<div class=skipped id=skipped><b>Skipped {len(skipped)} damaged "
        f"part{'s' if len(skipped) > 1 else ''}</b> (the rest is shown):<ul>{items}</ul></div>"
    )


def _overview(run, title, file_stats, reasoning, states, branch_pages) -> str:
    parts = [f"<h1>{esc(title)}</h1>"]
    fmt_name = f" · reasoning {esc(run.reasoning)}" if run.reasoning else ""
    parts.append(
        f"<p class=small>{'training run' if run.kind == 'train' else 'eval output'} "
        f"· {esc(run.path)} · env {esc(run.env_name or '?')}{fmt_name}</p>"
    )
    parts.append(skipped_note(run.skipped))
    parts.append(overview.events_section(run, branch_pages))
    if run.metrics:
        parts.append(overview.curves_section(run))
        parts.append(overview.collapse_section(run))
    if run.summary:
        rows = "".join(
            f"<tr><th>{esc(k)}</th><td>{fmt(v)}</td></tr>" for k, v in sorted(run.summary.items())
        )
        parts.append(f"<h2>Metrics</h2><table id=summary>{rows}</table>")
    parts.append(overview.validation_section(run, file_stats, states))
    parts.append(overview.reasoning_section(reasoning, run))
    parts.append(overview.steps_section(run, file_stats))
    if run.config_text:
        parts.append(
            "<h2>Config</h2><details><summary>show</summary>"
            f"<pre id=config>{esc(run.config_text)}</pre></details>"
        )
    return "".join(parts)


# -------------------------------------------------------------------------- the site
def build_site(
    path: str | Path,
    out: str | Path | None = None,
    on_skip: Callable[[str], None] | None = None,
) -> Path:
    """Build the site for the run folder ``path`` into ``out`` (default ``path/site``);
    return the path of its ``index.html``. Each damaged part that was skipped is passed
    to ``on_skip`` (default: printed to stderr) and listed on the overview page."""
    report = on_skip or (lambda line: print(f"ragen view: skipped {line}", file=sys.stderr))
    collection: Collection = load(path)
    out = Path(out) if out is not None else collection.path / "site"
    out.mkdir(parents=True, exist_ok=True)
    (out / "assets").mkdir(exist_ok=True)
    for name in ("viewer.css", *SCRIPTS):
        shutil.copyfile(ASSETS / name, out / "assets" / name)
    for line in collection.skipped:
        report(line)
    if len(collection.runs) == 1 and collection.runs[0].name == "":
        run = collection.runs[0]
        summary_ = build_run(run, out, "")
        for line in run.skipped:
            report(line)
        if not summary_["files"] and not run.metrics and not run.summary and run.skipped:
            raise UsageError(
                f"nothing readable in {collection.path}: every part was damaged "
                f"({run.skipped[0]}{' ...' if len(run.skipped) > 1 else ''})"
            )
        return out / "index.html"
    summaries = []
    for run in collection.runs:
        depth = len(Path(run.name).parts)
        root = "../" * depth
        s = build_run(run, out / run.name, root, top=root)
        for line in run.skipped:
            report(f"{run.name}/{line}")
        s["href"] = f"{run.name}/index.html"
        summaries.append(s)
    rows = "".join(
        f'<tr><td><a class=run-link href="{esc(s["href"])}">{esc(s["name"])}</a></td>'
        f"<td>{esc(s['kind'])}</td><td>{esc(s['env'])}</td><td>{s['steps']}</td>"
        f"<td>{s['files']}</td><td>{fmt(s['success'], True)}</td><td>{s['events']}</td>"
        f"<td>{s['skipped'] or ''}</td></tr>"
        for s in summaries
    )
    body = (
        f"<h1>{esc(collection.path.name)}</h1>{skipped_note(collection.skipped)}<h2>Runs</h2>"
        "<table id=runs><tr><th>run</th><th>kind</th><th>env</th><th>steps</th>"
        "<th>trajectory files</th><th>success (last validation)</th><th>collapse events</th>"
        f"<th>damaged parts skipped</th></tr>{rows}</table>"
    )
    if collection.results:
        body += _results_table(collection.results)
    (out / "index.html").write_text(page(collection.path.name, "", body), encoding="utf-8")
    return out / "index.html"


def _results_table(results: dict[str, Any]) -> str:
    """A demo's results.json: success per policy (a column each) and, where the demo
    paired them on the same states, the RL gain with its 95% interval."""
    policies = sorted(
        {
            c
            for row in results.values()
            if isinstance(row, dict)
            for c, cell in row.items()
            if isinstance(cell, dict) and "success_rate" in cell
        }
    )
    gains = any(isinstance(row, dict) and row.get("rl_gain") for row in results.values())
    head = "".join(f"<th>{esc(c)}</th>" for c in policies)
    head += "<th>RL gain (points, 95% interval)</th>" if gains else ""
    body = ""
    for env, row in results.items():
        if not isinstance(row, dict):
            continue
        cells = "".join(
            f"<td>{fmt(cell.get('success_rate') if isinstance(cell := row.get(c), dict) else None, True)}</td>"
            for c in policies
        )
        if gains:
            cells += f"<td>{esc(_gain_text(row.get('rl_gain')))}</td>"
        body += f"<tr><td>{esc(env)}</td>{cells}</tr>"
    return (
        "<h2>Results (success rate, held-out seeds)</h2>"
        f"<table id=results><tr><th>env</th>{head}</tr>{body}</table>"
    )


def _gain_text(gain: Any) -> str:
    """``+8.2 [+4.9, +11.5]`` from the demo's ``rl_gain`` (success-rate units)."""
    if not isinstance(gain, dict) or not all(k in gain for k in ("mean", "low", "high")):
        return "-"
    return f"{100 * gain['mean']:+.1f} [{100 * gain['low']:+.1f}, {100 * gain['high']:+.1f}]"


__all__ = ["build_site", "build_run"]

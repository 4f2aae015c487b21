"""Read a run folder of any of the three kinds into one model the pages are built from.

* a ``ragen train`` run: ``config.yaml``, ``metrics.jsonl`` (metric rows, and event lines
  such as ``{"step": 17, "event": "collapse", "signal": ..., "message": ...}``) and
  ``trajectories/step_N.jsonl`` / ``val_step_N.jsonl``;
* a ``ragen eval`` output: ``trajectories.jsonl`` + ``metrics.json``;
* a folder holding several of those (``ragen demo``'s ``runs/demo``: ``<env>/rl`` runs,
  plus ``results.json``), found up to three levels down.

Trajectory files hold one record per episode (the trainer's ``trajectory_log`` and
``ragen eval``) or, in runs written before it, one record per training sample, where the
samples of a windowed episode repeat its turns: :func:`read_episodes` keeps one record
per episode either way.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragen.errors import UsageError

_STEP_FILE = re.compile(r"^(val_)?step_(\d+)\.jsonl$")
EXPECTED = (
    "a `ragen train` run (metrics.jsonl, config.yaml, trajectories/), a `ragen eval` output "
    "(trajectories.jsonl + metrics.json), or a folder holding such runs (`ragen demo`)"
)


@dataclass
class StepFile:
    """One trajectories file: ``kind`` is ``"train"``, ``"val"`` or ``"eval"``."""

    kind: str
    step: int
    path: Path

    @property
    def page(self) -> str:
        """File name of its page in the site."""
        if self.kind == "eval":
            return "eval.html"
        return f"{'val_' if self.kind == 'val' else ''}step_{self.step:06d}.html"

    @property
    def label(self) -> str:
        return {"train": "step", "val": "validation at step", "eval": "eval"}[self.kind] + (
            "" if self.kind == "eval" else f" {self.step}"
        )


@dataclass
class Run:
    """One training run or eval output."""

    name: str  # relative to the folder given to ``ragen view`` ("" for that folder itself)
    path: Path
    kind: str  # "train" | "eval"
    config_text: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    env_name: str = ""
    env_config: dict[str, Any] = field(default_factory=dict)
    metrics: list[dict[str, Any]] = field(default_factory=list)  # one row per step
    events: list[dict[str, Any]] = field(default_factory=list)  # metrics.jsonl event lines
    summary: dict[str, Any] = field(default_factory=dict)  # eval: metrics.json "metrics"
    files: list[StepFile] = field(default_factory=list)


@dataclass
class Collection:
    """What ``ragen view`` was pointed at: one run, or several (a demo folder)."""

    path: Path
    runs: list[Run]
    results: dict[str, Any] = field(default_factory=dict)  # a demo's results.json


def _is_train(path: Path) -> bool:
    return (path / "metrics.jsonl").is_file() or (path / "trajectories").is_dir()


def _is_eval(path: Path) -> bool:
    return (path / "trajectories.jsonl").is_file()


def load(path: str | Path) -> Collection:
    """The runs in ``path``; a :class:`UsageError` saying what was expected otherwise."""
    root = Path(path).expanduser()
    if not root.exists():
        raise UsageError(f"{root} does not exist; expected {EXPECTED}")
    if not root.is_dir():
        raise UsageError(f"{root} is a file, not a folder; expected {EXPECTED}")
    if _is_train(root) or _is_eval(root):
        runs = [load_run(root, "")]
    else:
        runs = [load_run(p, p.relative_to(root).as_posix()) for p in _find_runs(root, depth=3)]
    if not runs:
        raise UsageError(f"{root} holds no run; expected {EXPECTED}")
    results = {}
    if (root / "results.json").is_file():
        results = _read_json(root / "results.json")
    return Collection(root, runs, results if isinstance(results, dict) else {})


def _find_runs(folder: Path, depth: int) -> list[Path]:
    found = []
    for child in sorted(p for p in folder.iterdir() if p.is_dir()):
        if child.name in ("checkpoints", "tensorboard", "wandb", "superseded", "site"):
            continue
        if _is_train(child) or _is_eval(child):
            found.append(child)
        elif depth > 1:
            found += _find_runs(child, depth - 1)
    return found


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise UsageError(f"{path} is not readable JSON ({err})") from None


def load_run(path: Path, name: str) -> Run:
    if _is_train(path):
        run = Run(name, path, "train")
        cfg = path / "config.yaml"
        if cfg.is_file():
            import yaml

            run.config_text = cfg.read_text(encoding="utf-8")
            run.config = yaml.safe_load(run.config_text) or {}
            env = run.config.get("env") or {}
            run.env_name = str(env.get("name", ""))
            run.env_config = dict(env.get("config") or {})
        if (path / "metrics.jsonl").is_file():
            run.metrics, run.events = read_metrics_and_events(path / "metrics.jsonl")
        folder = path / "trajectories"
        if folder.is_dir():
            for p in sorted(folder.iterdir()):
                m = _STEP_FILE.match(p.name)
                if m:
                    run.files.append(StepFile("val" if m.group(1) else "train", int(m.group(2)), p))
        run.files.sort(key=lambda f: (f.step, f.kind != "train"))
        return run
    run = Run(name, path, "eval")
    if (path / "metrics.json").is_file():
        payload = _read_json(path / "metrics.json")
        run.summary = dict(payload.get("metrics") or {})
        settings = payload.get("settings") or {}
        run.config = settings
        run.config_text = json.dumps(settings, indent=2, default=str)
        run.env_name = str(settings.get("env", ""))
        run.env_config = dict(settings.get("env_config") or {})
    run.files.append(StepFile("eval", 0, path / "trajectories.jsonl"))
    return run


def read_metrics_and_events(path: Path) -> tuple[list[dict], list[dict]]:
    """``metrics.jsonl`` split into metric rows (by step, the last row of a step wins)
    and event lines (those with an ``"event"`` key). ``null`` becomes NaN."""
    from ragen.trainer.metrics_logger import read_metrics

    rows: dict[int, dict] = {}
    events = []
    for record in read_metrics(path, events=True):
        if "event" in record:
            events.append(record)
        elif isinstance(record.get("step"), (int, float)):
            rows.setdefault(int(record["step"]), {}).update(record)
    return [rows[s] for s in sorted(rows)], events


def read_episodes(path: Path) -> list[dict[str, Any]]:
    """One record per episode of a trajectories file, in file order."""
    episodes: dict[tuple[int, int], dict] = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                raise UsageError(f"{path} line {number} is not valid JSON") from None
            key = (record.get("group_id", 0), record.get("episode_id", number))
            if key not in episodes:
                episodes[key] = record
    return list(episodes.values())


def finite(value: Any) -> float | None:
    """``value`` as a float, or None when missing or not finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None

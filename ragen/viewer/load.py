"""Read a run folder of any of the three kinds into one model the pages are built from.

* a ``ragen train`` run: ``config.yaml``, ``metrics.jsonl`` (metric rows, and event lines
  such as ``{"step": 17, "event": "collapse", "signal": ..., "message": ...}``),
  ``trajectories/step_N.jsonl`` / ``val_step_N.jsonl``, and the branches a rollback
  abandoned (``superseded/<name>/``, the same files);
* a ``ragen eval`` output: ``trajectories.jsonl`` + ``metrics.json``;
* a folder holding several of those (``ragen demo``'s ``runs/demo``: ``<env>/rl`` runs,
  plus ``results.json``), found up to three levels down.

Trajectory files hold one record per episode (the trainer's ``trajectory_log`` and
``ragen eval``) or, in runs written before it, one record per training sample, where the
samples of a windowed episode repeat its turns: :func:`read_episodes` keeps one record
per episode either way.

Damaged input never stops the build: a file that is not text, a line that is not JSON,
a record of the wrong shape (a JSON list where an object belongs), a folder where a file
belongs, a file cut off mid-record: each is skipped, and what was skipped is said (one
line each, :attr:`Run.skipped`), while the rest is built.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragen.errors import UsageError
from ragen.run_layout import json_line

_STEP_FILE = re.compile(r"^(val_)?step_(\d+)\.jsonl$")
EXPECTED = (
    "a `ragen train` run (metrics.jsonl, config.yaml, trajectories/), a `ragen eval` output "
    "(trajectories.jsonl + metrics.json), or a folder holding such runs (`ragen demo`)"
)
#: folders of a run that are never runs themselves
_NOT_RUNS = ("checkpoints", "tensorboard", "wandb", "superseded", "site")


@dataclass
class StepFile:
    """One trajectories file: ``kind`` is ``"train"``, ``"val"`` or ``"eval"``;
    ``branch`` names the abandoned branch (``superseded/<branch>``) it belongs to."""

    kind: str
    step: int
    path: Path
    branch: str = ""

    @property
    def stem(self) -> str:
        """Its page's file name without ``.html`` (also the name of its data files)."""
        if self.kind == "eval":
            return "eval"
        base = f"{'val_' if self.kind == 'val' else ''}step_{self.step:06d}"
        return f"branch-{_slug(self.branch)}-{base}" if self.branch else base

    @property
    def page(self) -> str:
        """File name of its page in the site."""
        return f"{self.stem}.html"

    @property
    def label(self) -> str:
        if self.kind == "eval":
            return "eval"
        text = {"train": "step", "val": "validation at step"}[self.kind] + f" {self.step}"
        return f"{text} (abandoned branch {self.branch})" if self.branch else text


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", name)


@dataclass
class Branch:
    """The steps a rollback abandoned (``superseded/<name>/``), kept for reading."""

    name: str
    metrics: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def first_step(self) -> int | None:
        return int(self.metrics[0]["step"]) if self.metrics else None


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
    reasoning: str = ""  # the reply format (rollout.reasoning); "" when not recorded
    separator: str = "||"
    metrics: list[dict[str, Any]] = field(default_factory=list)  # one row per step
    events: list[dict[str, Any]] = field(default_factory=list)  # metrics.jsonl event lines
    summary: dict[str, Any] = field(default_factory=dict)  # eval: metrics.json "metrics"
    files: list[StepFile] = field(default_factory=list)
    branches: list[Branch] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # what was damaged, one line each

    def skip(self, path: Path, why: str) -> None:
        """Note that ``path`` (or part of it) was skipped, and why."""
        self.skipped.append(f"{_rel(path, self.path)}: {why}")


def _rel(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


@dataclass
class Collection:
    """What ``ragen view`` was pointed at: one run, or several (a demo folder)."""

    path: Path
    runs: list[Run]
    results: dict[str, Any] = field(default_factory=dict)  # a demo's results.json
    skipped: list[str] = field(default_factory=list)  # the collection's own files


def _is_train(path: Path) -> bool:
    return (path / "metrics.jsonl").exists() or (path / "trajectories").is_dir()


def _is_eval(path: Path) -> bool:
    return (path / "trajectories.jsonl").exists()


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
    collection = Collection(root, runs)
    if (root / "results.json").exists():
        results, why = read_json(root / "results.json")
        if isinstance(results, dict):
            collection.results = results
        else:
            collection.skipped.append(f"results.json: {why or 'not a JSON object'}")
    return collection


def _find_runs(folder: Path, depth: int) -> list[Path]:
    found = []
    for child in sorted(p for p in folder.iterdir() if p.is_dir()):
        if child.name in _NOT_RUNS:
            continue
        if _is_train(child) or _is_eval(child):
            found.append(child)
        elif depth > 1:
            found += _find_runs(child, depth - 1)
    return found


# ------------------------------------------------------------------ reading, damage-proof
def read_text(path: Path) -> tuple[str | None, str]:
    """``(text, "")``, or ``(None, why)`` for a folder, an unreadable or non-UTF-8 file."""
    if path.is_dir():
        return None, "a folder where a file belongs"
    try:
        return path.read_bytes().decode("utf-8"), ""
    except UnicodeDecodeError as err:
        return None, f"not UTF-8 text (byte {err.start})"
    except OSError as err:
        return None, f"unreadable ({err.strerror or err})"


def read_json(path: Path) -> tuple[Any, str]:
    """``(value, "")`` or ``(None, why)``."""
    text, why = read_text(path)
    if text is None:
        return None, why
    try:
        return json_line(text), ""
    except json.JSONDecodeError as err:
        return None, f"not valid JSON ({err.msg} at line {err.lineno})"
    except RecursionError:
        return None, "JSON nested too deeply"


class _Lines:
    """The JSON objects of a ``.jsonl`` file, one per line, with the damaged lines
    counted by reason (read as bytes: one bad line cannot spoil the others)."""

    def __init__(self, path: Path):
        self.path = path
        self.records: list[tuple[int, dict]] = []  # (line number, object)
        self.raw: list[bytes] = []  # each record's line as it was read
        self.bad: dict[str, list[int]] = {}  # reason -> line numbers
        self.error = ""  # the whole file could not be read
        if path.is_dir():
            self.error = "a folder where a file belongs"
            return
        try:
            data = path.read_bytes()
        except OSError as err:
            self.error = f"unreadable ({err.strerror or err})"
            return
        lines = data.split(b"\n")
        cut = bool(data) and not data.endswith(b"\n")  # the last line has no newline
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            try:
                record = json_line(raw.decode("utf-8"))
            except UnicodeDecodeError:
                self._bad("not UTF-8 text", number)
                continue
            except (json.JSONDecodeError, RecursionError):
                last = number == len(lines)
                self._bad("cut off mid-record" if last and cut else "not valid JSON", number)
                continue
            if not isinstance(record, dict):
                self._bad(f"a JSON {_kind(record)}, not an object", number)
                continue
            self.records.append((number, record))
            self.raw.append(raw)

    def _bad(self, why: str, number: int) -> None:
        self.bad.setdefault(why, []).append(number)

    def problems(self) -> list[str]:
        """What was skipped in this file, one line per reason."""
        out = [f"skipped ({self.error})"] if self.error else []
        return out + [f"{_count(n, 'line')} skipped ({why})" for why, n in self.bad.items()]


def _kind(value: Any) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}.get(
        type(value), "null" if value is None else type(value).__name__
    )


def _count(numbers: list[int], what: str) -> str:
    shown = ", ".join(map(str, numbers[:5]))
    more = f" and {len(numbers) - 5} more" if len(numbers) > 5 else ""
    return f"{what}{'s' if len(numbers) > 1 else ''} {shown}{more}"


# ------------------------------------------------------------------------------ runs
def load_run(path: Path, name: str) -> Run:
    if _is_train(path):
        run = Run(name, path, "train")
        _read_config(run, path / "config.yaml")
        if (path / "metrics.jsonl").exists():
            run.metrics, run.events = read_metrics_and_events(path / "metrics.jsonl", run)
        run.files = _step_files(run, path / "trajectories")
        _read_branches(run)
        return run
    run = Run(name, path, "eval")
    if (path / "metrics.json").exists():
        payload, why = read_json(path / "metrics.json")
        if not isinstance(payload, dict):
            run.skip(path / "metrics.json", f"skipped ({why or 'not a JSON object'})")
            payload = {}
        summary, settings = payload.get("metrics"), payload.get("settings")
        run.summary = dict(summary) if isinstance(summary, dict) else {}
        settings = settings if isinstance(settings, dict) else {}
        run.config = settings
        run.config_text = json.dumps(settings, indent=2, default=str)
        run.env_name = str(settings.get("env", ""))
        env_config = settings.get("env_config")
        run.env_config = dict(env_config) if isinstance(env_config, dict) else {}
        _read_rollout(run, settings.get("rollout"))
    run.files.append(StepFile("eval", 0, path / "trajectories.jsonl"))
    return run


def _read_config(run: Run, cfg: Path) -> None:
    if not cfg.exists():
        return
    text, why = read_text(cfg)
    config: Any = None
    if text is not None:
        import yaml

        try:
            config = yaml.safe_load(text)
        except yaml.YAMLError as err:
            why = f"not valid YAML ({str(err).splitlines()[0]})"
    if config is None and not why:
        why = "empty"
    elif config is not None and not isinstance(config, dict):
        config, why = None, f"a YAML {_kind(config)}, not a mapping"
    if config is None:
        run.skip(cfg, f"skipped ({why}); the run is shown without its config")
        return
    run.config_text, run.config = text or "", config
    env = config.get("env") if isinstance(config.get("env"), dict) else {}
    run.env_name = str(env.get("name", "") or "")
    env_config = env.get("config")
    run.env_config = dict(env_config) if isinstance(env_config, dict) else {}
    _read_rollout(run, config.get("rollout"))


def _read_rollout(run: Run, rollout: Any) -> None:
    if isinstance(rollout, dict):
        run.reasoning = str(rollout.get("reasoning") or ("free_think" if rollout else ""))
        run.separator = str(rollout.get("separator") or "||")


def _step_files(run: Run, folder: Path, branch: str = "") -> list[StepFile]:
    files = []
    if folder.is_dir():
        for p in sorted(folder.iterdir()):
            m = _STEP_FILE.match(p.name)
            if m:
                kind = "val" if m.group(1) else "train"
                files.append(StepFile(kind, int(m.group(2)), p, branch))
    files.sort(key=lambda f: (f.step, f.kind != "train"))
    return files


def _read_branches(run: Run) -> None:
    """The abandoned branches under ``superseded/``, oldest first."""
    folder = run.path / "superseded"
    if not folder.is_dir():
        return
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        branch = Branch(sub.name)
        if (sub / "metrics.jsonl").exists():
            branch.metrics, branch.events = read_metrics_and_events(sub / "metrics.jsonl", run)
        files = _step_files(run, sub / "trajectories", sub.name)
        if branch.metrics or files:
            run.branches.append(branch)
            run.files += files
    run.branches.sort(key=lambda b: (b.first_step is None, b.first_step or 0, b.name))
    # a later rollback moves the earlier one's warnings (logged at steps after the
    # restored one) into its branch: gather every event, in the order they happened
    seen = {json.dumps(e, sort_keys=True, default=str) for e in run.events}
    for b in run.branches:
        for e in b.events:
            key = json.dumps(e, sort_keys=True, default=str)
            if key not in seen:
                seen.add(key)
                run.events.append({**e, "branch": b.name})
    if all(finite(e.get("time")) is not None for e in run.events):
        # (a rollback is logged in the same millisecond as its warnings, after them)
        run.events.sort(key=lambda e: (e["time"], e.get("event") == "rollback"))


def read_metrics_and_events(path: Path, run: Run | None = None) -> tuple[list[dict], list[dict]]:
    """``metrics.jsonl`` split into metric rows (by step, the last row of a step wins)
    and event lines (those with an ``"event"`` key). ``null`` becomes NaN. Damaged lines
    are skipped and, given ``run``, reported on it."""
    lines = _Lines(path)
    rows: dict[int, dict] = {}
    events = []
    no_step = []
    for number, record in lines.records:
        record = {k: (math.nan if v is None else v) for k, v in record.items()}
        step = record.get("step")
        if "event" in record:
            events.append(record)
        elif finite(step) is not None:
            rows.setdefault(int(step), {}).update(record)
        else:
            no_step.append(number)
    if run is not None:
        for problem in lines.problems():
            run.skip(path, problem)
        if no_step:
            run.skip(path, f'{_count(no_step, "line")} skipped (no numeric "step")')
    return [rows[s] for s in sorted(rows)], events


def read_episodes(
    path: Path, skipped: list[str] | None = None, name: str = ""
) -> list[dict[str, Any]]:
    """One record per episode of a trajectories file, in file order. Damaged lines and
    records that are not episodes are left out; given ``skipped``, one line per reason
    is appended to it (``"<name>: <what> skipped (<why>)"``, ``name`` default: the file
    name)."""
    return [record for _, record in read_episode_lines(path, skipped, name)]


def read_episode_lines(
    path: Path, skipped: list[str] | None = None, name: str = ""
) -> list[tuple[bytes, dict[str, Any]]]:
    """:func:`read_episodes` with each record's line as read (``(line, record)``)."""
    lines = _Lines(path)
    episodes: dict[tuple[Any, Any], tuple[bytes, dict]] = {}
    not_episodes = []
    for (number, record), raw in zip(lines.records, lines.raw):
        turns = record.get("turns", [])
        if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
            not_episodes.append(number)
            continue
        key = (_hashable(record.get("group_id", 0)), _hashable(record.get("episode_id", number)))
        if key not in episodes:
            episodes[key] = (raw, record)
    if skipped is not None:
        problems = lines.problems()
        if not_episodes:
            problems.append(
                f'{_count(not_episodes, "line")} skipped ("turns" is not a list of turns)'
            )
        skipped += [f"{name or path.name}: {p}" for p in problems]
    return list(episodes.values())


def _hashable(value: Any) -> Any:
    return value if isinstance(value, (int, float, str, bool, type(None))) else repr(value)


def finite(value: Any) -> float | None:
    """``value`` as a float, or None when missing or not finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None

"""Per-step metrics to ``metrics.jsonl``, TensorBoard, W&B and a live console display.

Files in the run folder::

    metrics.jsonl                one JSON object per ``log()`` call:
                                 {"step": 12, "time": 1718000000.123, "rollout/success_rate": 0.25, ...}
                                 and one per ``log_event()`` call (an ``"event"`` key marks it):
                                 {"step": 17, "time": ..., "event": "collapse",
                                  "signal": "group_reward_std", "message": "...", "action": "warn"}
    tensorboard/                 TensorBoard event files (scalars named like ``val/success_rate``)
    trajectories/step_000012.jsonl   one JSON object per trajectory record
    trajectories/val_step_000012.jsonl   the same for the validation rollout of that step
    wandb/, wandb_run_id.txt     only with W&B enabled (the id lets a resumed run continue it)

Conventions (read by :func:`read_metrics`, the plots and the HTML report):

* ``step`` counts COMPLETED training steps (1 after the first update) and ``start_step``
  is the step of the checkpoint a run resumes from (0 for a fresh run).
* Resume: when a logger opens, lines of an existing ``metrics.jsonl`` with
  ``step > start_step`` are dropped (the resumed run redoes those steps, so keeping
  them would leave duplicates), as are ``trajectories/step_*.jsonl`` files after
  ``start_step``; TensorBoard purges its events after ``start_step`` too. For a fresh
  run (``start_step=0``) this clears stale metrics left in the folder.
* Events (``"event"`` key, e.g. the collapse warnings of ``ragen.trainer.collapse``)
  share the file with the per-step metrics so one file tells the whole story;
  :func:`read_metrics` leaves them out (every plot reads it) and :func:`read_events`
  returns only them. They follow the same resume truncation as metrics lines.
* Non-finite values: JSON has no NaN/Infinity, so NaN, +inf and -inf are written as
  ``null``; :func:`read_metrics` turns ``null`` back into ``float("nan")``. TensorBoard
  and W&B receive the raw value.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shutil
import sys
import time
import uuid
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from ragen.errors import ConfigError, MissingDependencyError, MissingFileError
from ragen.run_layout import json_line

METRICS_FILE = "metrics.jsonl"
TRAJECTORY_DIR = "trajectories"
TENSORBOARD_DIR = "tensorboard"
WANDB_ID_FILE = "wandb_run_id.txt"
_RESERVED = ("step", "time")
EVENT_KEY = "event"  # marks a line of metrics.jsonl as an event, not a step's metrics
# training (step_N) and validation (val_step_N) trajectory files
_TRAJ_FILE = re.compile(r"^(?:val_)?step_(\d+)\.jsonl$")
TRAJECTORY_KINDS = ("step", "val_step")

# What the console shows: (label, candidate metric names). The first candidate present
# in a step's metrics is shown; a candidate also matches a metric that merely ends with
# "/<candidate>", so "success_rate" finds "rollout/success_rate".
DEFAULT_CONSOLE_KEYS: list[tuple[str, list[str]]] = [
    ("success", ["rollout/success_rate", "success_rate"]),
    ("reward", ["rollout/reward_mean", "reward_mean"]),
    ("rstd", ["rollout/group_reward_std", "group_reward_std"]),  # mean in-group std
    ("ent", ["actor/entropy", "entropy"]),
    ("gnorm", ["actor/grad_norm_max", "grad_norm_max", "actor/grad_norm"]),
    ("val", ["val/success_rate"]),
    # episodes ended by max_model_len, and by the env's own step limit: a run whose
    # contexts overflow shows it at once instead of only in metrics.jsonl
    ("ctx_trunc", ["rollout/truncation_rate"]),
    ("env_trunc", ["rollout/env_truncation_rate"]),
]


class MetricsLogger:
    """Log one dict of scalar metrics per training step to every configured sink.

    Args:
        run_dir: the run folder (created if missing).
        total_steps: the run's last step, for the progress display and ETA.
        console: show progress on stdout: a live ``rich`` display on a terminal, one
            compact plain line per step otherwise (CI logs, ``| tee``).
        tensorboard: write TensorBoard scalars under ``run_dir/tensorboard/``.
        wandb: ``{"project": ..., "mode": "offline"|"online"|"disabled", "name": ...}``
            (also ``entity``, ``group``, ``tags``, ``notes``); ``None`` disables W&B.
            Offline mode needs no network; its files go to ``run_dir/wandb/``.
        config: the resolved training config, stored with the W&B run and in TensorBoard.
        start_step: completed steps at the checkpoint this run resumes from (module doc).
        console_keys: metric names for the console (default: success rate, reward mean,
            in-group reward std, entropy, max grad norm, validation success).
        stream: where console output goes (default ``sys.stdout``).
        force_terminal: override terminal detection (``True`` forces the live display).
    """

    def __init__(
        self,
        run_dir: str | Path,
        total_steps: int,
        *,
        console: bool = True,
        tensorboard: bool = True,
        wandb: Mapping[str, Any] | None = None,
        config: Mapping[str, Any] | None = None,
        start_step: int = 0,
        console_keys: list[str] | None = None,
        stream: TextIO | None = None,
        force_terminal: bool | None = None,
    ):
        if not isinstance(total_steps, int) or total_steps < 0:
            raise ValueError(f"total_steps must be a non-negative int, got {total_steps!r}")
        if not isinstance(start_step, int) or start_step < 0:
            raise ValueError(f"start_step must be a non-negative int, got {start_step!r}")
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.total_steps = total_steps
        self.start_step = start_step
        self._closed = False
        self._t0 = time.time()
        self._last_log_time = self._t0
        self._last_step = start_step
        self._stream = stream if stream is not None else sys.stdout
        self._display = (
            [(_short_label(k), [k]) for k in console_keys]
            if console_keys is not None
            else DEFAULT_CONSOLE_KEYS
        )
        self._shown: dict[str, str] = {}  # label -> last formatted value (live display)

        wandb_module = _import_wandb(wandb) if wandb else None  # fail before touching files
        self.metrics_path = self.run_dir / METRICS_FILE
        _truncate_metrics(self.metrics_path, start_step)
        _drop_trajectories_after(self.run_dir / TRAJECTORY_DIR, start_step)
        self._metrics_file = open(self.metrics_path, "a", encoding="utf-8")
        self._tb = self._wandb_run = self._progress = self._console = None
        try:
            if tensorboard:
                self._tb = _open_tensorboard(self.run_dir, start_step, config)
            if wandb_module is not None:
                self._wandb_run = _open_wandb(wandb_module, self.run_dir, wandb, config, start_step)
            if console:
                self._start_console(force_terminal)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ public API
    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Record the metrics of completed step ``step`` in every sink.

        Values must be numbers: ``int``/``float``/``bool``, numpy scalars, or 1-element
        tensors/arrays (converted with ``.item()``). ``"step"`` and ``"time"`` are reserved.
        """
        self._check_open()
        if not isinstance(step, int) or isinstance(step, bool):
            raise TypeError(f"step must be an int, got {type(step).__name__}")
        values = {key: _to_number(key, value) for key, value in metrics.items()}
        now = time.time()
        record = {"step": step, "time": round(now, 3)}
        record.update({k: (v if _finite(v) else None) for k, v in values.items()})
        self._metrics_file.write(json.dumps(record, allow_nan=False) + "\n")
        self._metrics_file.flush()  # a crash loses at most the line being written

        if self._tb is not None:
            for key, value in values.items():
                self._tb.add_scalar(key, value, step)
            self._tb.flush()
        if self._wandb_run is not None:
            self._wandb_run.log(values, step=step)

        step_seconds = now - self._last_log_time if step != self._last_step else None
        self._last_log_time, self._last_step = now, step
        if self._progress is not None or self._console is not None:
            self._update_console(step, values, now, step_seconds)

    def log_event(self, step: int, event: str, **fields: Any) -> dict[str, Any]:
        """Append an event line to ``metrics.jsonl`` and print it; return the record.

        ``{"step": step, "time": ..., "event": event, **fields}``; ``fields`` must be
        JSON-able (strings, numbers, lists, dicts). Events are not sent to TensorBoard or
        W&B (they are not scalars) and :func:`read_metrics` skips them.
        """
        self._check_open()
        if not isinstance(step, int) or isinstance(step, bool):
            raise TypeError(f"step must be an int, got {type(step).__name__}")
        clash = set(fields) & {*_RESERVED, EVENT_KEY}
        if clash:
            raise ValueError(f"event fields {sorted(clash)} are reserved")
        record = {"step": step, "time": round(time.time(), 3), EVENT_KEY: str(event)}
        record.update(_jsonable(dict(fields)))
        self._metrics_file.write(json.dumps(record, allow_nan=False) + "\n")
        self._metrics_file.flush()
        return record

    def log_trajectories(self, step: int, records: list[Any], kind: str = "step") -> Path:
        """Write ``run_dir/trajectories/<kind>_XXXXXX.jsonl`` (one record per line) and return it.

        ``kind``: ``"step"`` for training rollouts, ``"val_step"`` for validation ones.
        Records are dicts (or dataclasses / objects with ``to_json()``); tensors and numpy
        values become lists/numbers, non-finite floats become ``null``.
        """
        self._check_open()
        if kind not in TRAJECTORY_KINDS:
            raise ValueError(f"kind must be one of {TRAJECTORY_KINDS}, got {kind!r}")
        folder = self.run_dir / TRAJECTORY_DIR
        folder.mkdir(exist_ok=True)
        path = folder / f"{kind}_{step:06d}.jsonl"
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for record in records:
                if hasattr(record, "to_json") and callable(record.to_json):
                    record = record.to_json()
                f.write(json.dumps(_jsonable(record), allow_nan=False) + "\n")
        os.replace(tmp, path)  # readers (the viewer) never see half a file
        return path

    def print(self, msg: str) -> None:
        """Print a message above the live display (or plainly when there is none)."""
        if self._progress is not None:
            self._live.console.print(msg, markup=False, highlight=False)
        else:
            print(msg, file=self._stream, flush=True)

    def close(self) -> None:
        """Stop the display and flush/close every sink. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if getattr(self, "_progress", None) is not None:
            self._live.stop()
        self._metrics_file.close()
        if getattr(self, "_tb", None) is not None:
            self._tb.close()
        if getattr(self, "_wandb_run", None) is not None:
            self._wandb_run.finish()

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ console
    def _start_console(self, force_terminal: bool | None) -> None:
        from rich.console import Console

        console = Console(file=self._stream, force_terminal=force_terminal)
        if not console.is_terminal or console.is_dumb_terminal:
            self._console = console  # plain lines: no escape codes, no live redraws
            return
        from rich.console import Group
        from rich.live import Live
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        # Progress line on top, metrics on their own line below, so a narrow terminal
        # squeezes neither the step counter nor the numbers.
        self._progress = Progress(
            TextColumn("[bold]step {task.completed}/{task.total}"),
            BarColumn(bar_width=24),
            TimeElapsedColumn(),
            TextColumn("eta {task.fields[eta]}"),
            console=console,
        )
        self._task = self._progress.add_task(
            "train", total=self.total_steps, completed=self.start_step, eta="?"
        )
        self._metrics_line = _Line()
        self._live = Live(
            Group(self._progress, self._metrics_line), console=console, refresh_per_second=2
        )
        self._live.start()

    def _update_console(
        self, step: int, values: Mapping[str, float], now: float, step_seconds: float | None
    ) -> None:
        for label, candidates in self._display:
            key = _pick(values, candidates)
            if key is not None:
                self._shown[label] = _fmt(values[key])
        if step_seconds is not None:
            self._shown["s/step"] = f"{step_seconds:.1f}"
        parts = [f"{label} {value}" for label, value in self._shown.items()]
        done_here = step - self.start_step
        eta = (
            _hms((now - self._t0) / done_here * max(self.total_steps - step, 0))
            if done_here > 0
            else "?"
        )
        if self._progress is not None:
            self._progress.update(self._task, completed=step, eta=eta)
            self._metrics_line.text = " | ".join(parts)
            self._live.refresh()
            return
        # Plain line: only this step's values (the live view keeps the last known ones).
        current = [
            f"{label} {_fmt(values[key])}"
            for label, candidates in self._display
            if (key := _pick(values, candidates)) is not None
        ]
        if step_seconds is not None:
            current.append(f"{step_seconds:.1f}s/step")
        head = f"step {step}/{self.total_steps} | elapsed {_hms(now - self._t0)} | eta {eta}"
        print(" | ".join([head, *current]), file=self._stream, flush=True)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("MetricsLogger is closed; create a new one to keep logging")


class _Line:
    """A one-line renderable whose text changes between refreshes of the live display."""

    def __init__(self) -> None:
        self.text = ""

    def __rich__(self) -> Any:
        from rich.text import Text

        return Text(self.text, style="cyan")


# ------------------------------------------------------------------------------- reading
def read_metrics(run_dir: str | Path, events: bool = False) -> list[dict[str, Any]]:
    """The per-step records of ``run_dir/metrics.jsonl`` (or of that file), in file order.

    ``null`` values (non-finite when logged) come back as ``float("nan")``. A truncated
    last line (a crash mid-write) is skipped; any other unreadable line is an error.
    Event lines (with an ``"event"`` key, see :meth:`MetricsLogger.log_event`) are left
    out unless ``events=True``, which returns every line.
    """
    records = _read_lines(run_dir)
    return records if events else [r for r in records if EVENT_KEY not in r]


def read_events(run_dir: str | Path, event: str | None = None) -> list[dict[str, Any]]:
    """Only the event lines of ``metrics.jsonl`` (of kind ``event`` if given), in file order."""
    return [
        r
        for r in _read_lines(run_dir)
        if EVENT_KEY in r and (event is None or r[EVENT_KEY] == event)
    ]


def _read_lines(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir)
    if path.is_dir():
        path = path / METRICS_FILE
    if not path.is_file():
        raise MissingFileError(
            f"no metrics file at {path}; pass a run folder that holds {METRICS_FILE}"
        )
    lines = path.read_text(encoding="utf-8").splitlines()
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json_line(line)
        except json.JSONDecodeError:
            if number == len(lines):
                warnings.warn(f"{path}: skipping a truncated last line", stacklevel=2)
                continue
            raise ValueError(f"{path} line {number} is not valid JSON: {line[:80]!r}") from None
        records.append({k: (float("nan") if v is None else v) for k, v in record.items()})
    return records


# ------------------------------------------------------------------------------- helpers
def _truncate_metrics(path: Path, start_step: int) -> None:
    """Keep only the lines of completed steps ``<= start_step`` (see module doc)."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            step = json_line(line)["step"]
        except (json.JSONDecodeError, KeyError, TypeError):
            continue  # a partial line from a crash
        if isinstance(step, int) and step <= start_step:
            kept.append(line + "\n")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(kept), encoding="utf-8")
    os.replace(tmp, path)


def move_logs_after(run_dir: str | Path, step: int, dest: str | Path) -> list[str]:
    """Move the logs of steps after ``step`` from ``run_dir`` into ``dest`` (never delete).

    ``metrics.jsonl`` lines with ``step > step`` go to ``dest/metrics.jsonl`` (the rest
    stay), trajectory files after ``step`` to ``dest/trajectories/``, and TensorBoard
    (which cannot split its event files) is copied whole to ``dest/tensorboard/``; the
    resumed run's logger then purges the later events from the live copy. Returns the
    names of what was moved or copied.
    """
    run_dir, dest = Path(run_dir), Path(dest)
    moved = []
    metrics = run_dir / METRICS_FILE
    if metrics.is_file():
        later = [
            line + "\n"
            for line in metrics.read_text(encoding="utf-8").splitlines()
            if (number := _line_step(line)) is not None and number > step
        ]
        if later:
            dest.mkdir(parents=True, exist_ok=True)
            (dest / METRICS_FILE).write_text("".join(later), encoding="utf-8")
            _truncate_metrics(metrics, step)
            moved.append(METRICS_FILE)
    traj = run_dir / TRAJECTORY_DIR
    if traj.is_dir():
        for file in sorted(traj.iterdir()):
            match = _TRAJ_FILE.match(file.name)
            if match and int(match.group(1)) > step:
                (dest / TRAJECTORY_DIR).mkdir(parents=True, exist_ok=True)
                os.replace(file, dest / TRAJECTORY_DIR / file.name)
                moved.append(f"{TRAJECTORY_DIR}/{file.name}")
    tb = run_dir / TENSORBOARD_DIR
    if tb.is_dir() and any(tb.iterdir()):
        shutil.copytree(tb, dest / TENSORBOARD_DIR)
        moved.append(f"{TENSORBOARD_DIR}/ (copy)")
    return moved


def _line_step(line: str) -> int | None:
    try:
        step = json_line(line)["step"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return None  # a partial line from a crash
    return step if isinstance(step, int) else None


def _drop_trajectories_after(folder: Path, start_step: int) -> None:
    if not folder.is_dir():
        return
    for file in folder.iterdir():
        match = _TRAJ_FILE.match(file.name)
        if match and int(match.group(1)) > start_step:
            file.unlink()


def _open_tensorboard(run_dir: Path, start_step: int, config: Mapping | None):
    from torch.utils.tensorboard import SummaryWriter

    # purge_step hides events a crashed run wrote after the checkpoint we resume from.
    writer = SummaryWriter(
        log_dir=str(run_dir / TENSORBOARD_DIR),
        purge_step=start_step + 1 if start_step > 0 else None,
    )
    if config is not None and start_step == 0:
        text = json.dumps(_jsonable(config), indent=2, allow_nan=False)
        writer.add_text("config", f"```\n{text}\n```", 0)
    return writer


WANDB_MODES = ("offline", "online", "disabled")  # the W&B "mode" setting
_WANDB_KEYS = {"project", "name", "mode", "entity", "group", "tags", "notes"}


def _import_wandb(spec: Mapping[str, Any]):
    """Validate the W&B settings; return the ``wandb`` module, or ``None`` when disabled."""
    unknown = set(spec) - _WANDB_KEYS
    if unknown:
        raise ConfigError(
            f"unknown W&B setting(s) {sorted(unknown)}; allowed: {sorted(_WANDB_KEYS)}"
        )
    mode = spec.get("mode", "offline")
    if mode not in WANDB_MODES:
        raise ConfigError(f"W&B mode must be 'offline', 'online' or 'disabled', got {mode!r}")
    if mode == "disabled":
        return None
    try:
        import wandb
    except ImportError:
        raise MissingDependencyError(
            "W&B logging was requested but wandb is not installed: pip install 'ragen[wandb]' "
            "(or turn W&B off, e.g. trainer.wandb=false)"
        ) from None
    return wandb


def _open_wandb(
    wandb: Any, run_dir: Path, spec: Mapping[str, Any], config: Mapping | None, start_step: int
):
    # A resumed run continues the same W&B run instead of starting a new one.
    id_file = run_dir / WANDB_ID_FILE
    if start_step > 0 and id_file.is_file():
        run_id = id_file.read_text().strip()
    else:
        run_id = uuid.uuid4().hex[:12]
        id_file.write_text(run_id + "\n")
    return wandb.init(
        project=spec.get("project", "ragen"),
        name=spec.get("name"),
        entity=spec.get("entity"),
        group=spec.get("group"),
        tags=spec.get("tags"),
        notes=spec.get("notes"),
        mode=spec.get("mode", "offline"),
        dir=str(run_dir),
        id=run_id,
        resume="allow",
        config=_jsonable(dict(config)) if config is not None else None,
        reinit="create_new",
        # console="off": our own display owns the terminal; W&B gets metrics via log().
        settings=wandb.Settings(console="off", quiet=True),
    )


def _to_number(key: str, value: Any) -> int | float:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):  # also numpy.float64, a float subclass
        return float(value)
    size = getattr(value, "numel", None)
    size = size() if callable(size) else getattr(value, "size", None)
    if hasattr(value, "item") and size == 1:  # numpy scalars/arrays, torch tensors
        item = value.item()
        if isinstance(item, bool):
            return int(item)
        if isinstance(item, (int, float)):
            return item
    raise TypeError(
        f"metric {key!r} must be a number, got {type(value).__name__}"
        + (
            f" with {size} elements; log a reduction such as .mean()"
            if size not in (None, 1)
            else ""
        )
    )


def _finite(value: float) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


def _jsonable(obj: Any) -> Any:
    """Plain JSON data: tensors/arrays -> lists, numpy scalars -> numbers, NaN/inf -> None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, (str, int, bool)):
        return obj
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _jsonable(dataclasses.asdict(obj))
    if hasattr(obj, "tolist"):  # torch tensors, numpy arrays and scalars
        return _jsonable(obj.tolist())
    if type(obj).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf

        return _jsonable(OmegaConf.to_container(obj, resolve=True))
    return str(obj)  # paths, enums, ...: readable rather than an error in a log file


def _pick(values: Mapping[str, Any], candidates: list[str]) -> str | None:
    for name in candidates:
        if name in values:
            return name
    for name in candidates:
        for key in values:
            if key.endswith("/" + name):
                return key
    return None


def _short_label(key: str) -> str:
    return key.rsplit("/", 1)[-1]


def _fmt(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        return str(value)
    return f"{value:.4g}"


def _hms(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"

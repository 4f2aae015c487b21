"""Reading the results files, and where each came from.

Every figure of a generated block comes from a JSON file committed under
``experiments/<name>/results/`` (a grid study's ``results.json`` copied there, a
finding's ``<finding>.json``, the demo over seeds' ``<label>.json``) or from a log beside
it. Provenance (the command that wrote the file, the device, the commit and the date)
is read from the file itself when it carries it (top-level keys or a ``provenance``
object), else from ``provenance.yaml`` here, which records it for the files written
before they did; a file in neither says "not recorded".
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import yaml

from experiments.report.gains import SeedGain, seed_gain

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = Path(__file__).with_name("provenance.yaml")
FIELDS = ("command", "device", "commit", "date")
NOT_RECORDED = "not recorded"


@functools.cache
def _load(path: Path) -> Any:
    return json.loads(path.read_text())


def load(relpath: str, root: Path = ROOT) -> dict[str, Any]:
    """A results file (a path relative to the repository root) as parsed JSON."""
    path = root / relpath
    if not path.is_file():
        raise FileNotFoundError(f"{relpath}: no such results file (a block names it)")
    return _load(path)


def text(relpath: str, root: Path = ROOT) -> str:
    """A log or markdown file beside the results, as text."""
    return (root / relpath).read_text()


@functools.lru_cache(maxsize=1)
def _registry() -> dict[str, dict[str, Any]]:
    return yaml.safe_load(REGISTRY.read_text()) or {}


def provenance(relpath: str, root: Path = ROOT) -> dict[str, str]:
    """``command``, ``device``, ``commit``, ``date`` (and ``seeds`` / ``note`` when
    recorded) of a results file: its own keys first, then the registry."""
    own: dict[str, Any] = {}
    path = root / relpath
    if path.suffix == ".json" and path.is_file():
        data = _load(path)
        own = {**{k: data[k] for k in FIELDS if isinstance(data.get(k), str)},
               **data.get("provenance", {})}  # fmt: skip
    merged = {**_registry().get(relpath, {}), **own}
    out = {k: str(merged.get(k, NOT_RECORDED)) for k in FIELDS}
    for extra in ("seeds", "note"):
        if extra in merged:
            out[extra] = str(merged[extra])
    return out


def describe(relpath: str, root: Path = ROOT) -> str:
    r"""``\`command\`; device; commit abc1234, 2026-11-26`` (what is not recorded says so)."""
    p = provenance(relpath, root)
    device = p["device"] if p["device"] != NOT_RECORDED else "device not recorded"
    when = f"commit {p['commit']}, {p['date']}"
    if p["commit"] == NOT_RECORDED:
        when = "commit and date not recorded"
    return f"`{p['command'].strip()}`; {device}; {when}" + (
        f" ({p['note']})" if "note" in p else ""
    )


def provenance_line(relpaths: list[str], root: Path = ROOT) -> str:
    """One bullet per file: the file, then :func:`describe`."""
    return "\n".join(f"* `{rel}`: {describe(rel, root)}" for rel in relpaths)


# -- grid studies (experiments/grids/run.py's results.json) ---------------------------
def grid_envs(data: dict[str, Any]) -> list[str]:
    return [k for k in data if k not in ("config", "provenance") and isinstance(data[k], dict)]


def grid_variants(data: dict[str, Any], env: str) -> list[str]:
    """The RL variants of ``env`` in the order first met (seed by seed)."""
    seen: list[str] = []
    for seed in sorted(data[env], key=int):
        seen += [v for v in data[env][seed] if v != "warm" and v not in seen]
    return seen


def grid_pairs(
    data: dict[str, Any], env: str, variant: str, warm: dict[str, Any] | None = None
) -> list[SeedGain]:
    """Per seed, the warm start against ``variant`` after RL on the study's held-out
    states; ``warm`` is another study whose warm starts these runs started from (a
    results file that holds RL rows only)."""
    n = int(data["config"]["eval_episodes"])
    source = warm if warm is not None else data
    out = []
    for seed in sorted(data.get(env, {}), key=int):
        row = data[env][seed]
        before = source.get(env, {}).get(seed, {}).get("warm")
        if variant in row and before is not None:
            out.append(seed_gain(seed, before, row[variant], n))
    return out


def warm_fit(record: dict[str, Any], key: str = "heldout_reply_accuracy") -> float | None:
    """The last epoch's ``key`` of a warm start's SFT fit record."""
    fit = record.get("fit") or []
    return fit[-1].get(key) if fit else None


def log_match(relpath: str, pattern: str, root: Path = ROOT) -> re.Match[str]:
    """The first match of ``pattern`` in a log; raises when the log does not have it
    (the figure it backs would otherwise silently vanish)."""
    m = re.search(pattern, text(relpath, root))
    if m is None:
        raise ValueError(f"{relpath}: no line matches {pattern!r}")
    return m


def demo_seed_files(root: Path = ROOT) -> list[str]:
    """The demo-over-seeds results (``experiments/demo_seeds/results/<label>.json``),
    ``default.json`` first."""
    folder = root / "experiments" / "demo_seeds" / "results"
    files = sorted(folder.glob("*.json"), key=lambda p: (p.stem != "default", p.stem))
    return [str(p.relative_to(root)) for p in files]

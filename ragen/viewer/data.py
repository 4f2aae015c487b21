"""What the pages load: episode records cut down to what is shown, and the data files.

Every data file is a script, ``data/<name>.js``, that calls ``RAGEN_DATA(name, payload)``
(Chromium forbids ``fetch()`` of local files, but a ``<script src>`` works from
``file://``). The payload is the JSON, deflated and base64-encoded: trajectories are
repetitive text and shrink 5-20x; the page inflates it with the browser's own
``DecompressionStream``. :func:`read_data_file` reads one back (tests, tools).

A step's episodes are split in two: an index (one small entry per episode: what a card
shows, :func:`episode_entry`) and chunks of :data:`CHUNK` episode records, as the
trajectories file holds them, which a page loads only when it shows one of them or
searches them (and reads with its own ``compactTurn``).

The reasoning of a turn is also set out here: under a structured format
(``rollout.reasoning``) its sections (:func:`ragen.agent.reasoning.parse_reply`), and
each stated fact checked against the truth the rollout recorded (``info["facts"]``:
the state, the intended outcome of the actions and the state that followed them).
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragen.agent.reasoning import REASONING_FORMATS, SECTIONS, parse_reply

from .load import finite

#: episodes per chunk file
CHUNK = 64
#: characters of the first thought a card shows
SNIPPET = 120


def text_of(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))


def _texts(value: Any) -> list[str]:
    return [text_of(v) for v in value] if isinstance(value, list) else []


def _flags(value: Any) -> list[bool]:
    return [bool(v) for v in value] if isinstance(value, list) else []


# ------------------------------------------------------------------------- data files
def data_script(name: str, payload: Any, compress: bool = True) -> str:
    """The text of ``data/<name>.js``."""
    raw = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    if not compress:
        return f"RAGEN_DATA({json.dumps(name)},{raw});\n"
    packed = base64.b64encode(zlib.compress(raw.encode("utf-8"), 6)).decode("ascii")
    return f'RAGEN_DATA({json.dumps(name)},"{packed}");\n'


def write_data(folder: Path, name: str, payload: Any, compress: bool = True) -> int:
    """Write ``folder/<name>.js``; return its size in bytes."""
    text = data_script(name, payload, compress)
    (folder / f"{name}.js").write_text(text, encoding="utf-8")
    return len(text)


def write_lines(folder: Path, name: str, lines: list[bytes]) -> int:
    """Write ``folder/<name>.js`` holding JSON lines (``RAGEN_DATA(name, packed, 1)``:
    the page parses each line); return its size in bytes."""
    packed = base64.b64encode(zlib.compress(b"\n".join(lines), 6)).decode("ascii")
    text = f'RAGEN_DATA({json.dumps(name)},"{packed}",1);\n'
    (folder / f"{name}.js").write_text(text, encoding="ascii")
    return len(text)


_SCRIPT = re.compile(r'^RAGEN_DATA\(("(?:[^"\\]|\\.)*"),(.*?)(,1)?\);\s*$', re.S)


def read_data_file(path: str | Path) -> tuple[str, Any]:
    """``(name, payload)`` of a data file written by :func:`write_data` (a file of
    :func:`write_lines`: the list of its records)."""
    m = _SCRIPT.match(Path(path).read_text(encoding="utf-8"))
    if m is None:
        raise ValueError(f"{path} is not a ragen view data file")
    name, body = json.loads(m.group(1)), m.group(2)
    if body.startswith('"'):
        body = zlib.decompress(base64.b64decode(json.loads(body))).decode("utf-8")
    if m.group(3):
        return name, [json.loads(line) for line in body.split("\n") if line.strip()]
    return name, json.loads(body)


# ------------------------------------------------------------------------- reasoning
@dataclass
class Reading:
    """How to read a run's replies: its format and action separator."""

    reasoning: str = ""
    separator: str = "||"

    @property
    def structured(self) -> bool:
        """Whether replies may have sections (a structured format, or one not recorded)."""
        return self.reasoning not in REASONING_FORMATS or bool(SECTIONS[self.reasoning])


_FACT = re.compile(r"^\s*([A-Za-z_]+)\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)\s*$")


def _facts(text: str) -> tuple[list[tuple[str, int, int]], list[str]]:
    """The ``kind (row,col)`` facts of ``text`` and its unreadable pieces."""
    facts, bad = [], []
    for piece in text.split(";"):
        if not piece.strip():
            continue
        m = _FACT.match(piece)
        if m:
            facts.append((m.group(1).lower(), int(m.group(2)), int(m.group(3))))
        else:
            bad.append(piece.strip())
    return facts, bad


def _show(fact: tuple[str, int, int]) -> str:
    return f"{fact[0]} ({fact[1]},{fact[2]})"


def check_facts(stated: str, truth: str) -> dict[str, Any]:
    """Each fact of ``stated`` marked true or false against ``truth``, and the true
    facts it left out: ``{"stated": [[fact, ok]], "missed": [...], "truth": truth}``
    (an unreadable piece is ``[piece, None]``)."""
    said, bad = _facts(stated)
    true, _ = _facts(truth)
    left = Counter(true)
    marks: list[list[Any]] = []
    for fact in said:
        ok = left[fact] > 0
        if ok:
            left[fact] -= 1
        marks.append([_show(fact), ok])
    marks += [[piece, None] for piece in bad]
    missed = []
    for fact in true:  # what is left of the truth after the matches was not stated
        if left[fact] > 0:
            left[fact] -= 1
            missed.append(_show(fact))
    return {"stated": marks, "missed": missed, "truth": truth}


def sections_of(response: str, reading: Reading) -> dict[str, str] | None:
    """The sections of a well-formed structured reply, None otherwise."""
    fmt = reading.reasoning
    if fmt not in REASONING_FORMATS:
        fmt = _guess_format(response)
    if not fmt or not SECTIONS[fmt]:
        return None
    parsed = parse_reply(response, fmt, reading.separator)
    return dict(parsed.sections) if parsed.format_ok and parsed.sections else None


def _guess_format(response: str) -> str:
    """The structured format whose tags ``response`` has (a run whose config is lost)."""
    has = {s for s in ("observation", "prediction") if f"<{s}>" in response}
    if "<reasoning>" not in response or not has:
        return ""
    return {
        frozenset({"observation"}): "grounding",
        frozenset({"prediction"}): "world_modeling",
        frozenset({"observation", "prediction"}): "grounding_world_modeling",
    }[frozenset(has)]


# --------------------------------------------------------------------------- episodes
def turn_extras(t: dict[str, Any], reading: Reading) -> dict[str, Any] | None:
    """What the page cannot read off a turn record itself: under a structured format the
    reply's sections, and each stated fact checked against the recorded truth
    (``info["facts"]``): ``gf`` the grounding, ``pf`` the prediction against what
    happened (with the ``intended`` outcome the world_model reward scores)."""
    if not t.get("format_ok", True):
        return None
    sections = sections_of(text_of(t.get("response")), reading)
    if not sections:
        return None
    out: dict[str, Any] = {"sec": sections}
    info = t.get("info") if isinstance(t.get("info"), dict) else {}
    facts = info.get("facts") if isinstance(info.get("facts"), dict) else {}
    if "observation" in sections and isinstance(facts.get("state"), str):
        out["gf"] = check_facts(sections["observation"], facts["state"])
    if "prediction" in sections and isinstance(facts.get("next"), str):
        out["pf"] = check_facts(sections["prediction"], facts["next"])
        out["pf"]["intended"] = text_of(facts.get("intended"))
    return out


def episode_entry(
    i: int, ep: dict[str, Any], verdicts: list[bool | None], reading: Reading
) -> dict[str, Any]:
    """The index entry of one episode record (what its card shows and filters on), with
    ``x``: per turn the thought/answer mismatch verdict (``verdicts``) and, under a
    structured format, :func:`turn_extras`."""
    turns = ep.get("turns") or []
    first = turns[0] if turns else {}
    kept = ep.get("kept")
    entry = {
        "i": i,
        "g": _id(ep.get("group_id"), 0),
        "e": _id(ep.get("episode_id"), i),
        "s": _id(ep.get("seed"), 0),
        "env": text_of(ep.get("env_name")),
        "ok": bool(ep.get("success", False)),
        "r": finite(ep.get("episode_reward")) or 0.0,
        "n": len(turns),
        "end": text_of(ep.get("end_reason")),
        "k": None if kept is None else bool(kept),
        "fe": sum(not t.get("format_ok", True) for t in turns),
        "mm": sum(bool(v) for v in verdicts),
        "src": text_of(ep.get("source")),
        "sn": (text_of(first.get("thought")) or text_of(first.get("response")))[:SNIPPET],
        "ch": i // CHUNK,
        "mv": [None if v is None else int(v) for v in verdicts],
    }
    extras = [turn_extras(t, reading) for t in turns] if reading.structured else []
    if any(extras):
        entry["rx"] = extras
    return entry


def _id(value: Any, default: int) -> int | str:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return default if value is None else text_of(value)

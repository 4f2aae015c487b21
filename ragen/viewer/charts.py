"""Metric charts as inline SVG (no plotting library in the page).

:func:`panel` draws one chart: lines (a metric, a bound, an abandoned branch drawn
faded), horizontal reference lines (a threshold, a chance level), and the run's events
as labelled markers: a collapse warning at its step (signal and action), a rollback as
an arrow from the step it left back to the checkpoint it restored. Axes get "nice"
ticks (1, 2, 2.5 or 5 x 10^k) with grid lines, and the left margin fits the widest
label. The ``<svg>`` carries its data range (``data-x0``..``data-y1``) and plot box,
and every line its metric key, so a test can map the drawn points back to values.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

COLORS = ["#1f6fd1", "#e0701b", "#2a9d4b", "#9b3fc2", "#c33", "#6b7280", "#0f8b8d"]
W, H = 360, 210
RIGHT, TOP, BOTTOM = 12, 34, 30
CHAR_W = 6.0  # px per character of a 10px label


@dataclass
class Line:
    """One drawn series: ``points`` are (step, value)."""

    label: str
    points: list[tuple[float, float]]
    key: str = ""  # the metric key (data-key)
    style: str = "solid"  # solid | bound (dashed) | chance (dotted) | faded (a branch)
    color: str = ""
    branch: str = ""  # the abandoned branch it belongs to


@dataclass
class Ref:
    """A horizontal reference line at ``y``: ``kind`` threshold | chance | bound."""

    y: float
    label: str
    kind: str = "threshold"


_REF_STYLE = {
    "threshold": ('stroke="#c33" stroke-width="1.3"', "#c33"),
    "chance": ('stroke="#6b7280" stroke-width="1.2" stroke-dasharray="2 3"', "#56607a"),
    "bound": ('stroke="#2a9d4b" stroke-width="1.2" stroke-dasharray="6 3"', "#1e7a3a"),
}


def nice_step(span: float, n: int = 5) -> float:
    """A round tick spacing (1, 2, 2.5 or 5 x 10^k) giving about ``n`` ticks over ``span``."""
    raw = span / max(1, n - 1)
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if m * mag >= raw * 0.999:
            return m * mag
    return 10 * mag


def ticks(lo: float, hi: float, n: int = 5, min_step: float = 0.0) -> tuple[list[float], float]:
    """Tick values covering ``[lo, hi]`` and their spacing, at least ``min_step`` (1 on
    an axis of steps, which are integers: 2 steps get the ticks 1 and 2, not 1.0, 1.2, ...
    labelled "1 1 1 2 2 2")."""
    step = max(nice_step(hi - lo, n), min_step)
    first = math.floor(lo / step + 1e-9) * step
    out: list[float] = []
    while not out or out[-1] < hi - step * 1e-9:  # until a tick covers ``hi``
        v = first + len(out) * step
        out.append(0.0 if abs(v) < step * 1e-9 else v)
    return out, step


def tick_label(v: float, step: float, scale: float | None = None) -> str:
    """``v`` with as many decimals as ``step`` needs; scientific when the axis's
    ``scale`` (its largest absolute value, default ``|v|``) is tiny or huge."""
    if v == 0:
        return "0"
    scale = abs(v) if scale is None else scale
    if scale >= 1e5 or scale < 1e-2:
        text = f"{v:.2e}"
        mantissa, exp = text.split("e")
        mantissa = mantissa.rstrip("0").rstrip(".")
        return f"{mantissa}e{int(exp)}"
    decimals = 0  # as many as the spacing needs: 0.25 -> 2, 2.5 -> 1, 50 -> 0
    while decimals < 6 and not math.isclose(
        step * 10**decimals, round(step * 10**decimals), rel_tol=1e-6
    ):
        decimals += 1
    return f"{v:.{decimals}f}"


def _domain(values: list[float], flat_share: float = 0.05) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    # a span under 5% of the values' size is drawn as +-2.5% around them: auto-scaling a
    # flat curve (entropy 0.095-0.096, a share of 0.99-1.0) would paint noise as a trend
    min_span = flat_share * max(abs(lo), abs(hi)) or 0.1
    if hi - lo < min_span:
        mid = (lo + hi) / 2
        lo, hi = mid - min_span / 2, mid + min_span / 2
    return lo, hi


def _event_tip(e: dict[str, Any]) -> str:
    if e.get("event") == "rollback":
        return rollback_text(e)
    value = e.get("value")
    shown = f" = {value:.4g}" if isinstance(value, (int, float)) else ""
    return (
        f"step {e.get('step')}: collapse warning [{e.get('signal', '')}{shown}] -> "
        f"{e.get('action', '')}: {e.get('message', '')}"
    )


def rollback_text(e: dict[str, Any]) -> str:
    """One line for a ``rollback`` event: where from, where to, why, what changed."""
    change = e.get("change") if isinstance(e.get("change"), dict) else {}
    parts = []
    for key, pair in change.items():
        if isinstance(pair, list) and len(pair) == 2:
            parts.append(f"{key} {pair[0]:g} -> {pair[1]:g}" if _nums(pair) else f"{key} {pair}")
    lrs = e.get("lr") if isinstance(e.get("lr"), dict) else {}
    applied = ", ".join(f"{k} lr now {v:.3g}" for k, v in lrs.items() if _nums([v]))
    signals = e.get("signals") if isinstance(e.get("signals"), list) else []
    return (
        f"rollback at step {e.get('from_step', '?')} to the checkpoint of step "
        f"{e.get('step')} (signal {', '.join(map(str, signals)) or '?'}); change: "
        f"{'; '.join(parts) or 'none'}" + (f" (applied: {applied})" if applied else "")
    )


def _nums(values: list[Any]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def panel(
    title: str,
    lines: Sequence[Line],
    events: Sequence[dict[str, Any]] = (),
    refs: Sequence[Ref] = (),
    note: str = "",
    chart_id: str = "",
) -> str:
    """One chart as an HTML ``<div class=panel>`` holding its SVG and legend."""
    lines = [ln for ln in lines if ln.points]
    events = [e for e in events if isinstance(e.get("step"), (int, float))]
    xs = [x for ln in lines for x, _ in ln.points]
    xs += [float(e["step"]) for e in events]
    xs += [float(e["from_step"]) for e in events if isinstance(e.get("from_step"), (int, float))]
    ys = [y for ln in lines for _, y in ln.points] + [r.y for r in refs]
    x_lo, x_hi = min(xs), max(xs)
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    y_lo, y_hi = _domain(ys)
    y_ticks, y_step = ticks(y_lo, y_hi, 5)
    y0, y1 = y_ticks[0], y_ticks[-1]
    x_ticks, x_step = ticks(x_lo, x_hi, 6, min_step=1.0)  # the x axis counts steps
    x_ticks = [t for t in x_ticks if x_lo <= t <= x_hi] or [x_lo, x_hi]
    scale = max(abs(y0), abs(y1))
    y_labels = [tick_label(v, y_step, scale) for v in y_ticks]
    left = int(12 + CHAR_W * max(len(s) for s in y_labels))
    pw, ph = W - left - RIGHT, H - TOP - BOTTOM

    def px(x: float) -> float:
        return left + (x - x_lo) / (x_hi - x_lo) * pw

    def py(y: float) -> float:
        return TOP + (1 - (y - y0) / (y1 - y0)) * ph

    esc = html.escape
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}"'
        f' role="img" data-x0="{x_lo}" data-x1="{x_hi}" data-y0="{y0}" data-y1="{y1}"'
        f' data-left="{left}" data-top="{TOP}" data-pw="{pw}" data-ph="{ph}">'
        f"<title>{esc(title)}</title>",
        f'<text x="6" y="13" class="chart-title">{esc(title)}</text>',
    ]
    if note:
        out.append(f'<text x="6" y="26" class="chart-note">{esc(note)}</text>')
    for v, label in zip(y_ticks, y_labels):
        y = py(v)
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        out.append(f'<text x="{left - 4}" y="{y + 3.5:.1f}" text-anchor="end">{label}</text>')
    for v in x_ticks:
        x = px(v)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{TOP + ph}" class="grid"/>')
        label = tick_label(v, x_step)
        out.append(f'<text x="{x:.1f}" y="{TOP + ph + 13}" text-anchor="middle">{label}</text>')
    out.append(f'<text x="{left + pw}" y="{H - 3}" text-anchor="end" class="axis">step</text>')
    out.append(f'<rect x="{left}" y="{TOP}" width="{pw}" height="{ph}" class="frame"/>')
    for r in refs:
        stroke, color = _REF_STYLE.get(r.kind, _REF_STYLE["threshold"])
        y = py(r.y)
        # a threshold's label sits at the right end of its line, other levels' at the
        # left end, so that a threshold close to a neutral level stays readable
        x, anchor = (left + pw - 3, "end") if r.kind == "threshold" else (left + 3, "start")
        label_y = y - 3 if y - TOP > 12 else y + 10  # under a line at the top
        out.append(
            f'<line class="ref ref-{r.kind}" data-y="{r.y}" x1="{left}" x2="{left + pw}" '
            f'y1="{y:.1f}" y2="{y:.1f}" {stroke}><title>{esc(r.label)}</title></line>'
            f'<text x="{x}" y="{label_y:.1f}" text-anchor="{anchor}" fill="{color}" '
            f'class="ref-label" paint-order="stroke" stroke="#fff" stroke-width="3">'
            f"{esc(r.label)}</text>"
        )
    out += _event_marks(events, px, TOP, ph, left + pw * 0.6)
    colors: dict[str, str] = {}
    for ln in lines:
        if ln.style != "faded" and ln.label not in colors:
            colors[ln.label] = ln.color or COLORS[len(colors) % len(COLORS)]
    for ln in sorted(lines, key=lambda ln: ln.style != "faded"):  # branches underneath
        color = ln.color or colors.get(ln.label) or COLORS[0]
        dash = {"bound": ' stroke-dasharray="6 3"', "chance": ' stroke-dasharray="2 3"'}.get(
            ln.style, ""
        )
        if ln.style == "faded":
            dash = ' stroke-dasharray="3 2" opacity="0.4"'
        coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in ln.points)
        tip = ln.label + (f" (abandoned branch {ln.branch})" if ln.branch else "")
        out.append(
            f'<polyline class="series" data-key="{esc(ln.key)}" data-branch="{esc(ln.branch)}" '
            f'fill="none" stroke="{color}" stroke-width="1.6"{dash} points="{coords}">'
            f"<title>{esc(tip)}</title></polyline>"
        )
        if len(ln.points) < 40 and ln.style in ("solid", "faded"):
            out += [
                f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.2" fill="{color}"'
                f"{' opacity=0.4' if ln.style == 'faded' else ''}>"
                f"<title>{esc(tip)} step {x:g}: {y:.4g}</title></circle>"
                for x, y in ln.points
            ]
    out.append("</svg>")
    legend = [f'<span style="color:{c}">&#9632; {esc(label)}</span>' for label, c in colors.items()]
    if any(ln.style == "faded" for ln in lines):
        legend.append('<span class="faded-key">&#9632; abandoned branch (faded)</span>')
    attr = f' id="{esc(chart_id)}"' if chart_id else ""
    return f"<div class=panel{attr}>{''.join(out)}<div class=legend>{''.join(legend)}</div></div>"


def _label(x: float, y: float, text: str, color: str, flip_at: float) -> str:
    """A marker's label inside the plot's top, left of the marker past ``flip_at``."""
    anchor, dx = ("end", -3) if x > flip_at else ("start", 3)
    return (
        f'<text x="{x + dx:.1f}" y="{y}" text-anchor="{anchor}" fill="{color}" '
        f'class="event-label" paint-order="stroke" stroke="#fff" stroke-width="3">{text}</text>'
    )


def _event_marks(events, px, top: int, ph: int, flip_at: float) -> list[str]:
    """Collapse warnings (a dashed line per step and action, labelled with the signals)
    and rollbacks (an arrow from the step that was left back to the restored
    checkpoint). Labels go on four rows, so that neighbouring markers stay readable."""
    out = []
    warnings: dict[tuple[float, str], list[dict[str, Any]]] = {}
    for e in events:
        if e.get("event") != "rollback" or not isinstance(e.get("from_step"), (int, float)):
            warnings.setdefault((float(e["step"]), str(e.get("action", ""))), []).append(e)
    for n, ((step, action), group) in enumerate(sorted(warnings.items())):
        x = px(step)
        signals = [str(e.get("signal", e.get("event", ""))) for e in group]
        tip = html.escape("\n".join(_event_tip(e) for e in group))
        color = "#c33" if action in ("rollback", "stop") else "#c07a00"
        names = list(dict.fromkeys(signals))  # several: counted (the tooltip names them)
        text = f"&#9888; {html.escape(names[0]) if len(names) == 1 else f'{len(names)} signals'}"
        if action != "warn":
            text += f" &#8594; {html.escape(action)}"
        out.append(
            f'<g class="event-marker" data-event="{html.escape(str(group[0].get("event", "")))}" '
            f'data-step="{group[0]["step"]}" data-signals="{html.escape(" ".join(signals))}" '
            f'data-action="{html.escape(action)}"><title>{tip}</title>'
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + ph}" stroke="{color}" '
            f'stroke-dasharray="4 3" stroke-width="1.5"/>'
            + _label(x, top + 10 + 10 * (n % 4), text, color, flip_at)
            + "</g>"
        )
    rollbacks = [
        e for e in events if e.get("event") == "rollback" and e not in sum(warnings.values(), [])
    ]
    for k, e in enumerate(rollbacks):
        x0, x1 = px(float(e["from_step"])), px(float(e["step"]))
        y = top + ph - 5 - 13 * (k % 3)
        out.append(
            f'<g class="event-marker rollback-marker" data-event="rollback" '
            f'data-step="{e["step"]}" data-from="{e["from_step"]}">'
            f"<title>{html.escape(_event_tip(e))}</title>"
            f'<line x1="{x0:.1f}" x2="{x1:.1f}" y1="{y}" y2="{y}" stroke="#5b3fc2" '
            f'stroke-width="1.5"/><path d="M{x1:.1f},{y} l5,-3.5 v7 z" fill="#5b3fc2"/>'
            f'<line x1="{x1:.1f}" x2="{x1:.1f}" y1="{top}" y2="{top + ph}" stroke="#5b3fc2" '
            f'stroke-width="1" stroke-dasharray="1 2"/>'
            + _label(x1, y - 3, f"&#8634; {k + 1} to {e['step']}", "#5b3fc2", flip_at)
            + "</g>"
        )
    return out


def series(rows: Sequence[dict[str, Any]], key: str) -> list[tuple[float, float]]:
    """``(step, value)`` of ``key`` over ``rows``, finite values only."""
    out = []
    for r in rows:
        v = r.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out.append((float(r["step"]), float(v)))
    return out

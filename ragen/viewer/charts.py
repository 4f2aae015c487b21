"""Metric curves as inline SVG (no plotting library in the page), with event markers.

:func:`panels` draws one small chart per metric group; every collapse event of the run
(``metrics.jsonl`` lines with an ``"event"`` key) is a red dashed line at its step on
every chart, its message in a tooltip.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

COLORS = ["#1f6fd1", "#e0701b", "#2a9d4b", "#9b3fc2", "#c33", "#6b7280"]
W, H = 330, 190
LEFT, RIGHT, TOP, BOTTOM = 44, 10, 22, 26

#: (title, metric keys) of the overview's charts; empty charts are left out
DEFAULT_SPEC: list[tuple[str, list[str]]] = [
    ("success rate", ["rollout/success_rate", "val/success_rate"]),
    ("reward", ["rollout/reward_mean", "val/reward_mean"]),
    ("in-group reward std", ["rollout/group_reward_std"]),
    ("entropy", ["actor/entropy"]),
    ("grad norm", ["actor/grad_norm_max", "actor/grad_norm_mean"]),
    ("response length (tokens)", ["rollout/response_length", "val/response_length"]),
    ("StarPO-S kept groups", ["filter/kept_group_frac"]),
]


def default_spec(rows: Sequence[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """:data:`DEFAULT_SPEC`, plus the reasoning rewards (``reward/*``) in one chart, one
    chart per ``reasoning/*`` metric, and the ``collapse/*`` signals in one chart."""
    keys: dict[str, None] = {}
    for r in rows:
        keys.update(dict.fromkeys(r))
    spec = list(DEFAULT_SPEC)
    rewards = [k for k in keys if k.startswith("reward/")]
    if rewards:
        spec.append(("reasoning rewards", rewards))
    spec += [(k, [k]) for k in keys if k.startswith("reasoning/")]
    collapse = [k for k in keys if k.startswith("collapse/")]
    if collapse:
        spec.append(("collapse signals", collapse))
    return spec


def _series(rows, key) -> list[tuple[float, float]]:
    out = []
    for r in rows:
        v = r.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out.append((float(r["step"]), float(v)))
    return out


def _tick(v: float) -> str:
    return f"{v:.3g}"


def panel(title: str, series: dict[str, list[tuple[float, float]]], events) -> str:
    """One chart: ``series`` label -> [(step, value)], ``events`` the event records."""
    xs = [x for pts in series.values() for x, _ in pts] + [float(e["step"]) for e in events]
    ys = [y for pts in series.values() for _, y in pts]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    # a span under 5% of the values' size is drawn as +-5% around them: auto-scaling a
    # flat curve (entropy 0.095-0.096, a share of 0.99-1.0) would paint noise as a trend
    min_span = 0.05 * max(abs(y0), abs(y1)) or 0.1  # all zero: +-0.05
    if y1 - y0 < min_span:
        mid = (y0 + y1) / 2
        y0, y1 = mid - min_span / 2, mid + min_span / 2
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + (x - x0) / (x1 - x0) * pw

    def py(y: float) -> float:
        return TOP + (1 - (y - y0) / (y1 - y0)) * ph

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
        f'viewBox="0 0 {W} {H}" role="img"><title>{html.escape(title)}</title>',
        f'<text x="{LEFT}" y="14" style="font-weight:600">{html.escape(title)}</text>',
        f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#ccd"/>',
        f'<text x="{LEFT - 4}" y="{TOP + 8}" text-anchor="end">{_tick(y1)}</text>',
        f'<text x="{LEFT - 4}" y="{TOP + ph}" text-anchor="end">{_tick(y0)}</text>',
        f'<text x="{LEFT}" y="{H - 10}">{_tick(x0)}</text>',
        f'<text x="{LEFT + pw}" y="{H - 10}" text-anchor="end">step {_tick(x1)}</text>',
    ]
    for e in events:
        x = px(float(e["step"]))
        tip = html.escape(f"step {e['step']}: {e.get('signal', '')}: {e.get('message', '')}")
        out.append(
            f'<line class="event-marker" x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{TOP + ph}" '
            f'stroke="#d11" stroke-dasharray="4 3" stroke-width="1.5"><title>{tip}</title></line>'
        )
    for i, (label, pts) in enumerate(series.items()):
        color = COLORS[i % len(COLORS)]
        coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        out.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="1.6" points="{coords}">'
            f"<title>{html.escape(label)}</title></polyline>"
        )
        if len(pts) < 30:
            out += [
                f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.2" fill="{color}">'
                f"<title>{html.escape(label)} step {x:g}: {y:.4g}</title></circle>"
                for x, y in pts
            ]
    out.append("</svg>")
    legend = "".join(
        f'<span style="color:{COLORS[i % len(COLORS)]}">&#9632; {html.escape(label)}</span>'
        for i, label in enumerate(series)
    )
    return f"<div class=panel>{''.join(out)}<div class=legend>{legend}</div></div>"


def panels(
    rows: Sequence[dict[str, Any]],
    events: Sequence[dict[str, Any]] = (),
    spec: list[tuple[str, list[str]]] | None = None,
) -> str:
    """The charts of ``spec`` (default :func:`default_spec`) that have data, as HTML."""
    events = [e for e in events if isinstance(e.get("step"), (int, float))]
    charts = []
    for title, keys in spec if spec is not None else default_spec(rows):
        series = {k: pts for k in keys if (pts := _series(rows, k))}
        if series:
            charts.append(panel(title, series, events))
    return f"<div class=panels>{''.join(charts)}</div>" if charts else ""

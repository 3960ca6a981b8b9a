"""A static HTML page of the dashboard's panels, drawn from a real Prometheus's answers, for
the screenshot in docs/metrics.md (headless Chromium renders it; no Grafana needed)."""

from __future__ import annotations

import html
from typing import Any

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b")
WIDTH, HEIGHT = 560, 160


def _legend(template: str, labels: dict[str, str]) -> str:
    for key, value in labels.items():
        template = template.replace("{{" + key + "}}", value)
    return template


def _chart(series: list[tuple[str, list[tuple[float, float]]]]) -> str:
    points = [p for _, values in series for p in values]
    if not points:
        return '<p class="none">no data</p>'
    t0, t1 = min(t for t, _ in points), max(t for t, _ in points)
    low, high = min(0.0, min(v for _, v in points)), max(v for _, v in points)
    span_t, span_v = (t1 - t0) or 1.0, (high - low) or 1.0
    lines, legend = [], []
    for i, (name, values) in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        path = " ".join(
            f"{(t - t0) / span_t * WIDTH:.1f},{HEIGHT - (v - low) / span_v * HEIGHT:.1f}"
            for t, v in values
        )
        lines.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}"/>')
        last = values[-1][1] if values else 0.0
        legend.append(f'<span style="color:{colour}">■</span> {html.escape(name)}: {last:g}')
    return (
        f'<svg width="{WIDTH}" height="{HEIGHT}" viewBox="0 -4 {WIDTH} {HEIGHT + 8}">'
        f'<text x="0" y="10" class="axis">{high:g}</text>{"".join(lines)}</svg>'
        f'<div class="legend">{"<br>".join(legend)}</div>'
    )


def _colour(panel: dict[str, Any], value: float) -> str:
    """The colour of a single value by the panel's thresholds (the last step it reaches)."""
    colour = "#06c"
    for step in panel["fieldConfig"]["defaults"].get("thresholds", {}).get("steps", []):
        if step["value"] is None or value >= step["value"]:
            colour = step["color"]
    return colour


def page(dashboard: dict[str, Any], ranges: list[list[list[dict[str, Any]]]]) -> str:
    """The panels of ``dashboard``; ``ranges[panel][target]`` is a query_range result."""
    cells = []
    for panel, results in zip(dashboard["panels"], ranges, strict=True):
        series = [
            (
                _legend(target["legendFormat"], result["metric"]),
                [(float(t), float(v)) for t, v in result["values"]],
            )
            for target, answer in zip(panel["targets"], results, strict=True)
            for result in answer
        ]
        if panel["type"] == "singlestat":
            value = series[0][1][-1][1] if series and series[0][1] else 0.0
            body = f'<div class="stat" style="color:{_colour(panel, value)}">{value:g}</div>'
        else:
            body = _chart(series)
        cells.append(
            f'<div class="panel" title="{html.escape(panel["description"])}">'
            f"<h2>{html.escape(panel['title'])}</h2>{body}</div>"
        )
    return (
        "<!doctype html><meta charset=utf-8><title>drain-guard</title><style>"
        "body{font:13px sans-serif;background:#f4f5f7;margin:12px}"
        ".grid{display:grid;grid-template-columns:repeat(2,600px);gap:10px}"
        ".panel{background:#fff;border:1px solid #d2d2d2;padding:8px}"
        "h1{font-size:18px}h2{font-size:14px;margin:0 0 6px}.stat{font-size:40px;color:#06c}"
        ".axis{font-size:10px;fill:#666}.legend{font-size:11px;margin-top:4px}</style>"
        f"<h1>{html.escape(dashboard['title'])}: one agent holding a drain (simulated cluster)</h1>"
        f'<div class="grid">{"".join(cells)}</div>'
    )

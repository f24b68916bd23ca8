"""Render config/grafana/jupyterhub-gpu.json's panels from a real Prometheus and screenshot them (no Grafana here).

    python scripts/dashboard-screenshot.py http://127.0.0.1:9090 docs/images/monitoring-dashboard.png [seconds]

Each panel's queries run against the Prometheus at the URL (``query_range`` over the last ``seconds``, default
the last 5 minutes; a bar gauge panel: an instant query), are drawn as SVG in the dashboard's own grid, and the
page is screenshotted by Debian's Chromium through Playwright, as the browser tests run it. The monitoring test
(tests/monitoring/test_prometheus_hub.py) runs this at its end when JUPYTERHUB_GPU_DASHBOARD_SCREENSHOT names
the image: the charts then show that test's hub, sessions (simulated GPUs) and scenarios.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
import sys
import time
from pathlib import Path

import requests
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "config" / "grafana" / "jupyterhub-gpu.json"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
COLORS = ("#7eb26d", "#eab839", "#6ed0e0", "#ef843c", "#e24d42", "#1f78c1", "#ba43a9", "#705da0", "#508642")
COLUMN, ROW = 52, 34  # pixels of one of Grafana's 24 grid columns and of one grid row


def query(url: str, path: str, **params) -> list[dict]:
    r = requests.get(f"{url}/api/v1/{path}", params=params, timeout=30)
    r.raise_for_status()
    return r.json()["data"]["result"]


def legend(fmt: str, labels: dict) -> str:
    text = fmt
    for key, value in labels.items():
        text = text.replace("{{" + key + "}}", value or '""')
    return re.sub(r"\{\{\w+\}\}", '""', text)  # Prometheus leaves out a label whose value is empty


def number(value: float, unit: str) -> str:
    if not math.isfinite(value):
        return "–"
    if unit == "percentunit":
        return f"{value * 100:.0f}%"
    if unit == "s":
        return f"{value:.0f} s" if value < 120 else f"{value / 60:.1f} min"
    return f"{value:.3g}"


def timeseries_svg(series: list[tuple[str, list[tuple[float, float]]]], unit: str, width: int, height: int) -> str:
    points = [(t, v) for _, values in series for t, v in values if math.isfinite(v)]
    if not points:
        return f'<svg width="{width}" height="{height}"><text x="10" y="30" fill="#999">No data</text></svg>'
    t0, t1 = min(t for t, _ in points), max(t for t, _ in points)
    v0, v1 = 0.0, max(max(v for _, v in points), 1e-9) * 1.1
    left, bottom = 60, 24
    w, h = width - left - 30, height - bottom - 10

    def xy(t, v):
        return left + (t - t0) / max(t1 - t0, 1) * w, 10 + h - (v - v0) / (v1 - v0) * h

    parts = [f'<svg width="{width}" height="{height}" font-size="11" font-family="sans-serif">']
    for i in range(5):
        v = v0 + (v1 - v0) * i / 4
        _, y = xy(t0, v)
        parts.append(f'<line x1="{left}" x2="{left + w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#333"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" fill="#aaa" text-anchor="end">{number(v, unit)}</text>')
    for i in range(4):
        t = t0 + (t1 - t0) * i / 3
        x, _ = xy(t, v0)
        stamp = time.strftime("%H:%M:%S", time.gmtime(t))
        parts.append(f'<text x="{x:.1f}" y="{height - 6}" fill="#aaa" text-anchor="middle">{stamp}</text>')
    for n, (_, values) in enumerate(series):
        line = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(t, v) for t, v in values if math.isfinite(v)))
        parts.append(f'<polyline points="{line}" fill="none" stroke="{COLORS[n % len(COLORS)]}" stroke-width="2"/>')
    parts.append("</svg>")
    return "".join(parts)


def bars_html(rows: list[tuple[str, float]], unit: str) -> str:
    out = []
    for name, value in rows:
        share = max(0.0, min(value, 1.0))
        color = "#e24d42" if value >= 0.9 else "#ef843c" if value >= 0.8 else "#7eb26d"
        out.append(
            f'<div class="bar"><span>{html.escape(name)}</span><div class="track"><div style="width:{share * 100:.1f}%;'
            f'background:{color}"></div></div><b>{number(value, unit)}</b></div>'
        )
    return "".join(out) or '<p class="none">No data</p>'


def render(url: str, seconds: float) -> str:
    dashboard = json.loads(DASHBOARD.read_text())
    end = time.time()
    start = end - seconds
    step = max(1.0, seconds / 200)
    cells = []
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        width, height = grid["w"] * COLUMN, grid["h"] * ROW
        unit = panel["fieldConfig"]["defaults"].get("unit", "none")
        keys = []
        if panel["type"] == "bargauge":
            rows = []
            for target in panel["targets"]:
                for r in query(url, "query", query=target["expr"], time=end):
                    rows.append((legend(target["legendFormat"], r["metric"]), float(r["value"][1])))
            body = bars_html(sorted(rows), unit)
        else:
            series = []
            for target in panel["targets"]:
                for r in query(url, "query_range", query=target["expr"], start=start, end=end, step=step):
                    values = [(float(t), float(v)) for t, v in r["values"]]
                    series.append((legend(target["legendFormat"], r["metric"]), values))
            series.sort(key=lambda s: s[0])
            body = timeseries_svg(series, unit, width - 230, height - 50)
            for n, (name, values) in enumerate(series):
                last = values[-1][1] if values else float("nan")
                swatch = f'<i style="background:{COLORS[n % len(COLORS)]}"></i>'
                keys.append(f"<li>{swatch}{html.escape(name)} <b>{number(last, unit)}</b></li>")
        cells.append(
            f'<section style="left:{grid["x"] * COLUMN}px;top:{grid["y"] * ROW}px;width:{width - 8}px;'
            f'height:{height - 8}px"><h2>{html.escape(panel["title"])}</h2><div class="body">{body}'
            f"<ul>{''.join(keys)}</ul></div></section>"
        )
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dashboard["panels"])
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(end))
    return f"""<!doctype html><meta charset="utf-8"><style>
body {{ margin: 0; background: #111217; color: #ccccdc; font: 13px sans-serif; }}
header {{ padding: 10px 14px; border-bottom: 1px solid #2c2e33; }} header small {{ color: #8e8e99; }}
main {{ position: relative; height: {rows * ROW}px; margin: 8px; }}
section {{ position: absolute; background: #181b1f; border: 1px solid #2c2e33; border-radius: 3px; overflow: hidden; }}
h2 {{ font-size: 13px; margin: 6px 10px; color: #fff; }} .body {{ display: flex; }}
ul {{ list-style: none; margin: 4px 8px; padding: 0; width: 220px; font-size: 11px; }} li {{ margin: 2px 0; }}
li i {{ display: inline-block; width: 10px; height: 4px; margin-right: 5px; vertical-align: middle; }}
.bar {{ display: flex; align-items: center; margin: 8px 12px; gap: 10px; width: 560px; }}
.bar span {{ width: 160px; }} .track {{ flex: 1; height: 18px; background: #22252b; }} .track div {{ height: 100%; }}
.none {{ color: #999; margin: 10px; }}
</style><header><b>{html.escape(dashboard["title"])}</b> &nbsp; <small>config/grafana/jupyterhub-gpu.json, each panel's
queries run against a real Prometheus and drawn by scripts/dashboard-screenshot.py (not Grafana), {stamp}; GPUs
simulated</small></header><main>{"".join(cells)}</main>"""


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    url, out = argv[1].rstrip("/"), Path(argv[2])
    page = render(url, float(argv[3]) if len(argv) == 4 else 300.0)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        tab = browser.new_page(viewport={"width": 24 * COLUMN + 16, "height": 800})
        tab.set_content(page)
        out.parent.mkdir(parents=True, exist_ok=True)
        tab.screenshot(path=str(out), full_page=True)
        browser.close()
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

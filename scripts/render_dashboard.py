#!/usr/bin/env python3
"""Renders packaging/grafana/daros.json to a PNG from a real Prometheus.

Not Grafana: there is no Grafana here. Each panel's queries are evaluated
with Prometheus' query_range API over the window given and drawn where the
dashboard's grid puts the panel, with the panel's title, unit and legend
format, so the picture shows exactly what the shipped queries return.

usage: render_dashboard.py DASHBOARD PROM_URL START END OUT.png
"""
import json
import re
import sys
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.dates as mdates  # noqa: E402
from datetime import datetime, timezone  # noqa: E402

BG, PANEL, FG, GRID = "#111217", "#181b1f", "#ccccdc", "#2c3235"
UNIT_SCALE = {"bytes": (1 / 1048576, "MiB"), "s": (1, "s"), "percentunit": (100, "%"), "short": (1, "")}


def query_range(prom, expr, start, end, step):
    q = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{prom}/api/v1/query_range?{q}", timeout=30) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body}")
    return body["data"]["result"]


def legend(fmt, metric):
    if not fmt:
        return ",".join(f"{k}={v}" for k, v in metric.items()) or "value"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""), fmt)


def main():
    dash, prom, start, end, out = sys.argv[1:6]
    start, end = float(start), float(end)
    step = max(5, int((end - start) / 240))
    d = json.load(open(dash))
    panels = d["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    unit_h = 0.42  # inches per grid row
    fig = plt.figure(figsize=(20, rows * unit_h), facecolor=BG)
    H = rows * unit_h
    for p in panels:
        g = p["gridPos"]
        x0, w = g["x"] / 24, g["w"] / 24
        y_top = 1 - g["y"] / rows
        h = g["h"] / rows
        if p["type"] == "row":
            fig.text(x0 + 0.005, y_top - h / 2, p["title"], color=FG, fontsize=15,
                     fontweight="bold", va="center")
            continue
        pad_x, pad_y = 0.012, 0.55 / H
        ax = fig.add_axes([x0 + pad_x, y_top - h + pad_y, w - 2 * pad_x, h - 2.2 * pad_y], facecolor=PANEL)
        unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
        scale, suffix = UNIT_SCALE.get(unit, (1, ""))
        drawn = 0
        for t in p.get("targets", []):
            expr = t["expr"].replace("$instance", ".*")
            for s in query_range(prom, expr, start, end, step):
                xs = [datetime.fromtimestamp(float(v[0]), tz=timezone.utc) for v in s["values"]]
                ys = []
                for v in s["values"]:
                    try:
                        ys.append(float(v[1]) * scale)
                    except ValueError:
                        ys.append(float("nan"))
                ax.plot(xs, ys, linewidth=1.4, label=legend(t.get("legendFormat"), s["metric"])[:48])
                drawn += 1
        ax.set_title(p["title"] + (f"  [{suffix}]" if suffix else ""), color=FG, fontsize=11, loc="left")
        ax.tick_params(colors=FG, labelsize=8)
        for sp in ax.spines.values():
            sp.set_color(GRID)
        ax.grid(color=GRID, linewidth=0.6)
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M"))
        ax.set_xlim(datetime.fromtimestamp(start, tz=timezone.utc), datetime.fromtimestamp(end, tz=timezone.utc))
        if drawn:
            ax.legend(loc="upper left", fontsize=7, facecolor=PANEL, edgecolor=GRID, labelcolor=FG,
                      ncol=2 if drawn > 4 else 1)
        else:
            ax.text(0.5, 0.5, "no data", color="#6e7079", ha="center", va="center", transform=ax.transAxes)
        print(f"{p['title']}: {drawn} series", file=sys.stderr)
    fig.savefig(out, dpi=72, facecolor=BG)


if __name__ == "__main__":
    main()

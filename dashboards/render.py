"""The static dashboard page, next to its dashboard.json.

  ./pmlab dashboard (compute, then render: render.main([dashboard.json, ...]))

writes, in the directory of dashboard.json:
  dashboard.html        the page, with the JSON embedded in
                        <script type="application/json" id="dashboard-data">
  dashboard-page.js     page code (dashboards/page/), DOM text APIs only
  dashboard-page.css
  chart.min.js          Chart.js, copied from Debian's libjs-chart.js

so the page opens from file:// with no server and no network. With
--timelines PATH... it first draws the timeline pages (dashboards/timeline.py)
of the runs under PATH (cycles that did not pass, the slowest-callback
cycles) into RUN_DIR/timelines/, each linking back to the page, and links
them from the page; their
relative addresses are embedded as <script type="application/json"
id="timeline-links"> ({"<run id>/<cycle>": href}). The embedded
JSON has <, > and & escaped as \\u003c, \\u003e, \\u0026 so no string in it can
close the script element; the page's Content-Security-Policy allows only its
own script files.
"""

import argparse
import json
import os
import shutil
import sys
import urllib.parse

from dashboards.page_json import embed
from lab import files

PAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "page")
CHARTJS = "/usr/share/javascript/chart.js/chart.min.js"
PLACEHOLDER = "<!--PMLAB-DASHBOARD-DATA-->"
ASSETS = ("dashboard-page.js", "dashboard-page.css")


def links(timelines, out_dir):
    """{"<run id>/<cycle>": address relative to out_dir} of timeline pages
    ({(run id, cycle): path})."""
    found = {}
    for (run_id, cycle), path in sorted(timelines.items()):
        relative = os.path.relpath(os.path.abspath(path), out_dir).split(os.sep)
        found[f"{run_id}/{cycle}"] = "/".join(urllib.parse.quote(part) for part in relative)
    return found


def render(dashboard_path, chartjs=CHARTJS, html_name="dashboard.html", timelines=None):
    """Write the page next to dashboard_path; return the page's path.
    timelines: {(run id, cycle): path of its timeline page} to link."""
    with open(dashboard_path) as source:
        dashboard = json.load(source)
    out_dir = os.path.dirname(os.path.abspath(dashboard_path))
    with open(os.path.join(PAGE, "dashboard.html")) as source:
        template = source.read()
    if template.count(PLACEHOLDER) != 1:
        raise RuntimeError(f"{PAGE}/dashboard.html must hold {PLACEHOLDER} exactly once")
    data = (f'<script type="application/json" id="dashboard-data">{embed(dashboard)}</script>\n'
            f'<script type="application/json" id="timeline-links">{embed(links(timelines or {}, out_dir))}</script>')
    page = template.replace(PLACEHOLDER, data)
    if not os.path.isfile(chartjs):
        raise FileNotFoundError(f"{chartjs} not found: apt-get install libjs-chart.js (./pmlab build installs it)")
    shutil.copyfile(chartjs, os.path.join(out_dir, "chart.min.js"))
    for name in ASSETS:
        shutil.copyfile(os.path.join(PAGE, name), os.path.join(out_dir, name))
    html_path = os.path.join(out_dir, html_name)
    files.write_atomically(html_path, page)
    return html_path


def main(argv=None):
    parser = argparse.ArgumentParser(description="write dashboard.html next to dashboard.json")
    parser.add_argument("dashboard", help="dashboard.json from dashboards.compute")
    parser.add_argument("--chartjs", default=CHARTJS, help=f"Chart.js UMD build (default {CHARTJS})")
    parser.add_argument("--timelines", nargs="+", metavar="RESULTS_DIR_OR_RUN_DIR",
                        help="draw the timeline pages of these runs (those given to dashboards.compute) and link them")
    args = parser.parse_args(argv)
    timelines = None
    if args.timelines:
        from dashboards import timeline
        with open(args.dashboard) as source:
            board = json.load(source)
        page_path = os.path.join(os.path.dirname(os.path.abspath(args.dashboard)), "dashboard.html")
        timelines = timeline.for_dashboard(args.timelines, board, page=page_path)
        print(f"dashboard: {len(timelines)} timeline pages linked", file=sys.stderr)
    path = render(args.dashboard, args.chartjs, timelines=timelines)
    print(f"dashboard page: {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # ./pmlab dashboard is the command
    from lab.entry_points import redirect
    sys.exit(redirect("dashboards.render", "dashboard"))

"""JSON for a page's <script type="application/json"> element, shared by the
dashboard page (dashboards/render.py) and the timeline pages
(dashboards/timeline.py), so that neither imports the other for it."""

import json


def embed(data):
    """JSON text safe inside a <script> element: <, > and & escaped as
    \\u003c, \\u003e, \\u0026, so no string in it can close the element."""
    text = json.dumps(data, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")

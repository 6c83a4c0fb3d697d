"""pmlab dashboards: schemas for results, run manifests, dashboard JSON and page."""

"""pmlab pipelines: the commit pipeline, the nightly soak, shard merging,
series bisection, CI definitions (pipelines/ci) and the LAVA job
(pipelines/lava). Entry points are the executables in this folder; the
logic lives in the modules next to them so that it can be unit-tested
(pytest/test_pipelines*.py)."""

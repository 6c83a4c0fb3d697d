"""lab/files.py: whole-file writes (summary, manifest, dashboards, caches)."""

import json
import os

import pytest

from lab import files


def test_json_written_whole_with_one_trailing_newline(tmp_path):
    path = tmp_path / "summary.json"
    files.write_json(str(path), {"b": 1, "a": [1, 2]})
    assert path.read_text() == json.dumps({"a": [1, 2], "b": 1}, indent=2) + "\n"
    files.write_json(str(path), {"b": 1, "a": 2}, sort_keys=False, compact=True)
    assert path.read_text() == '{"b":1,"a":2}'


def test_a_failed_write_leaves_the_old_file_whole_and_no_temporary(tmp_path):
    path = tmp_path / "dashboard.html"
    files.write_atomically(str(path), "old page\n")
    with pytest.raises(TypeError):
        files.write_atomically(str(path), b"not text")  # fails inside the write, after the temporary exists
    assert path.read_text() == "old page\n"
    assert os.listdir(tmp_path) == ["dashboard.html"]

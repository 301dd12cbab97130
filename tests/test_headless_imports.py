"""Headless commands never import Textual: `kmon attach PID --once --json` on a real client,
with the interpreter's own import log (-X importtime) read back."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration  # real processes, a cluster or Spark


def imported_modules(importtime_stderr: str) -> set[str]:
    """Every module named in a ``-X importtime`` log ("import time: self | cumulative | name")."""
    names = set()
    for line in importtime_stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                names.add(name)
    return names


def test_attach_once_json_loads_no_textual(start_client):
    client = start_client("producer")
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "kmon", "attach",
                             str(client.pid), "--once", "--json"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    (snapshot,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert [p["pid"] for p in snapshot["processes"]] == [client.pid]
    modules = imported_modules(result.stderr)
    assert {"kmon.cli.text_view", "kmon.engine.sampler"} <= modules, "the import log was read"
    assert not {m for m in modules if m == "textual" or m.startswith("textual.")}

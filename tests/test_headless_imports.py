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


def test_a_dashboard_refused_for_its_arguments_loads_no_textual(tmp_path):
    """A config file kmon refuses, or no terminal, is said before Textual is imported: a
    mistake costs no dashboard's start-up."""
    config = tmp_path / "config.toml"
    config.write_bytes(b"\xff\xfe not text")
    for args in (["watch", "127.0.0.1:9", "--config", str(config)], ["watch", "127.0.0.1:9"]):
        result = subprocess.run([sys.executable, "-X", "importtime", "-m", "kmon", *args],
                                capture_output=True, text=True, timeout=60,
                                stdin=subprocess.DEVNULL)
        (said,) = [line for line in result.stderr.splitlines()
                   if not line.startswith("import time:")]
        assert result.returncode == 1 and said.startswith("kmon: error:"), result.stderr[-500:]
        modules = imported_modules(result.stderr)
        assert "kmon.cli.dashboard" in modules, "the import log was read"
        assert not {m for m in modules if m == "textual" or m.startswith("textual.")}, args

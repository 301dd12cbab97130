"""`kmon demo`: the README's first command, headless."""

from __future__ import annotations

import json
import time

import psutil
from conftest import kmon


def test_headless_demo_watches_its_workload_and_cleans_up():
    result = kmon("demo", "--headless", "--json", "--duration", "4s", "--interval", "500ms",
                  timeout=120)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    last = records[-1]
    assert len(last["processes"]) == 5
    types = sorted(c["type"] for p in last["processes"] for c in p["clients"])
    assert types == ["consumer", "consumer", "producer", "producer"]  # one is uninstrumented
    roles = {c["role"] for p in last["processes"] for c in p["connections"]}
    assert {"coordinator", "broker"} <= roles
    pids = {p["pid"] for p in last["processes"]}
    deadline = time.monotonic() + 10
    while any(psutil.pid_exists(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in pids if psutil.pid_exists(pid)], "demo left children behind"

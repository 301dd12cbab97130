"""A socket whose peer closed first is reported in CLOSE_WAIT, with an event.

A plain socket pair stands in for a broker-side close: the mock cluster
cannot be told to drop one client connection on demand.
"""

from __future__ import annotations

import json
import socket
import sys
import time

import pytest
from helpers import Child

pytestmark = pytest.mark.integration  # real processes, a cluster or Spark

HOLDER = """
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
print("CONNECTED", s.getsockname()[1], flush=True)
time.sleep(60)
"""


def test_peer_close_shows_close_wait_and_event():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        holder = Child([sys.executable, "-c", HOLDER, str(listener.getsockname()[1])])
        stream = None
        try:
            local_port = int(holder.wait_line("CONNECTED").split()[1])
            accepted, _ = listener.accept()
            stream = Child([sys.executable, "-m", "kmon", "attach", str(holder.pid), "--json",
                            "--interval", "200ms", "--any-process"])
            first = json.loads(stream.wait_line("{"))
            (row,) = first["processes"][0]["connections"]
            assert row["state"] == "ESTABLISHED" and row["role"] == "unknown"
            assert row["local"].endswith(f":{local_port}")
            accepted.close()  # the "broker" closes first
            deadline = time.monotonic() + 10
            seen = []
            while time.monotonic() < deadline:
                record = json.loads(stream.wait_line("{"))
                seen += [e["kind"] for e in record["events"]]
                rows = record["processes"][0]["connections"]
                if "close_wait" in seen and rows and rows[0]["state"] == "CLOSE_WAIT":
                    break
            assert "close_wait" in seen
            assert rows[0]["state"] == "CLOSE_WAIT"
        finally:
            holder.stop()
            if stream is not None:
                stream.stop()

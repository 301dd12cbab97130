"""A process's own word never moves another process's ``cluster`` label.

Once, a user's process that claimed, in its own spool, both an endpoint it listened on and a
root victim's broker joined the two into one cluster: the victim's series moved from
``cluster="127.0.0.1:29650"`` to ``cluster="127.0.0.1:29601 +1"``. The label now comes from
kmon's own Metadata query to a broker the process is connected to: the cluster id it sends.
"""

from __future__ import annotations

import subprocess
import time

import pytest
from helpers import cluster_id, get, python_as, start_serve, wait_for
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.integration  # a mock cluster, a throwaway user, the real kmon serve

# a throwaway user's process: a real producer to the victim's broker, and Produce requests
# of its own to a listener of its own, which reads them and never answers (so kmon's query
# confirms nothing there): kmon's wire gives both connections the role "broker"
CLAIMER = """\
import os, socket, struct, sys, threading

def swallow(conn):
    while conn.recv(65536):
        pass

own = socket.create_server(("127.0.0.1", 0))
port = own.getsockname()[1]
if os.fork() == 0:  # the listener: a process of its own, or kmon takes the claimer for a server
    while True:
        threading.Thread(target=swallow, args=(own.accept()[0],), daemon=True).start()
own.close()
from confluent_kafka import Producer
to_own = socket.create_connection(("127.0.0.1", port))
producer = Producer({"bootstrap.servers": sys.argv[1], "client.id": "claimer"})
print("own", port, flush=True)
for correlation in iter(int, 1):
    producer.produce("claimer-topic", b"x")
    producer.poll(0.2)
    body = struct.pack(">hhih", 0, 3, correlation % 2**31, 7) + b"claimer" + bytes(32)
    to_own.sendall(struct.pack(">i", len(body)) + body)
"""


def _labels(address: str) -> dict[str, set[str]]:
    """client_id -> its cluster labels, from kmon_connections on /metrics."""
    status, _, body = get(f"http://{address}/metrics")
    assert status == 200, body
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name == "kmon_connections":
                labels.setdefault(sample.labels["client_id"], set()).add(sample.labels["cluster"])
    return labels


def _claimed(address: str) -> float:
    """The claimer's connections whose role some claim gave (not unknown)."""
    body = get(f"http://{address}/metrics")[2]
    return sum(sample.value for family in text_string_to_metric_families(body)
               for sample in family.samples if sample.name == "kmon_connections"
               and sample.labels["client_id"] == "claimer" and sample.labels["role"] != "unknown")


VICTIM = "label-victim"


def test_a_users_spool_claims_do_not_move_a_victims_cluster_label(
        cluster, start_client, throwaway_user):
    start_client("producer", extra_args=("--client-id", VICTIM))
    expected = cluster_id(cluster)  # the cluster's id, as a real client reads it
    child, address = start_serve("--interval", "250ms")
    claimer = None
    try:
        until = time.monotonic() + 20  # kmon's own queries answered, or 20 s
        before = wait_for(lambda: ((label := _labels(address).get(VICTIM))
                                   and (label == {expected} or time.monotonic() > until)
                                   and label), "the victim labelled", seconds=60)
        prefix, env = python_as(throwaway_user.pw_name)
        claimer = subprocess.Popen([*prefix, "-c", CLAIMER, cluster], env=env,
                                   stdout=subprocess.PIPE, text=True)
        assert claimer.stdout.readline().startswith("own ")
        wait_for(lambda: _claimed(address) >= 2,
                 "the claimer's Produce requests to its listener and the victim's brokers",
                 seconds=60)
        for _ in range(8):  # two seconds of polls, the claimer's requests seen in each
            labels = _labels(address)
            assert labels[VICTIM] == before, labels
            time.sleep(0.25)
        assert before == {expected}
    finally:
        if claimer is not None:
            claimer.kill()
            claimer.wait()
        child.stop()

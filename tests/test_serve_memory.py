"""What a long-running kmon serve keeps: nothing of a client process once it is gone, and
series for at most 100 client_ids of one that lives."""

from __future__ import annotations

import sys

import pytest
from helpers import Child, wait_for

from kmon.engine.monitor import Monitor
from kmon.engine.sampler import ProcessSampler, SamplerSettings
from kmon.export.collector import HostCollector
from kmon.export.metrics import MAX_CLIENT_IDS, OTHER, HostMetrics
from kmon.sources.kernel.socket_readers import open_socket_reader


@pytest.mark.integration
def test_an_exited_process_leaves_no_state_in_the_engine_or_the_metrics(start_client):
    producer = start_client("producer")
    monitor = Monitor([ProcessSampler(producer.pid, open_socket_reader(),
                                      SamplerSettings(require_kafka=False))])
    metrics = HostMetrics()
    try:
        for _ in range(2):
            snapshot, events = monitor.poll()
            metrics.update(snapshot, events, {producer.pid: "test"}, 0.0)
        assert producer.pid in monitor.lives and producer.pid in metrics.processes()
        assert metrics.processes()[producer.pid].connections
        producer.stop()
        snapshot, events = monitor.poll()  # the exit, and its connections' closes
        metrics.update(snapshot, events, {}, 0.0)
        assert any(e.kind.value == "process_exit" for e in events)
        assert not monitor.lives and not monitor.last_views and not monitor.samplers
        assert not metrics.processes()
    finally:
        monitor.close()


MANY_CLIENT_IDS = """
import sys, time
from confluent_kafka import Producer
from kmon.agent import instrument
producers = [Producer(instrument({"bootstrap.servers": sys.argv[1], "client.id": f"kmon-cap-{i}"},
                                 client_type="producer")) for i in range(int(sys.argv[2]))]
for producer in producers:
    producer.list_topics(timeout=30)
print("READY", flush=True)
while True:  # statistics reach the spool from poll()
    for producer in producers:
        producer.poll(0)
    time.sleep(0.1)
"""


@pytest.mark.integration
def test_a_process_s_client_ids_beyond_the_first_100_share_the_other_label(cluster,
                                                                            spool_dir):
    """A process with 110 producers, each of its own client.id, seen by the real sampler
    and collector until the cap is reached: 100 client_id labels at most, the rest counted
    under (other), no connection left out."""
    clients = MAX_CLIENT_IDS + 10
    child = Child([sys.executable, "-c", MANY_CLIENT_IDS, cluster, str(clients)])
    monitor = Monitor([ProcessSampler(child.pid, open_socket_reader(),
                                      SamplerSettings(require_kafka=False))])
    metrics, labelled = HostMetrics(count_fds=False), set()
    collector = HostCollector(metrics)

    def series() -> list[tuple[str, float]]:
        """This poll's kmon_connections series of the process: (client_id, value)."""
        snapshot, events = monitor.poll()
        metrics.update(snapshot, events, {}, 0.0)
        (view,) = snapshot.processes
        (family,) = [f for f in collector.collect() if f.name == "kmon_connections"]
        found = [(s.labels["client_id"], s.value) for s in family.samples]  # its only
        assert sum(value for _, value in found) == len(view.connections)  # none left out
        labelled.update(client_id for client_id, _ in found if client_id != OTHER)
        return found

    try:
        child.wait_line("READY", timeout=120)
        found = wait_for(lambda: (now := dict(series())).get(OTHER) and now,
                         "connections under the (other) client_id", every=0.2)
    finally:
        child.stop()
        monitor.close()
    assert len(labelled) <= MAX_CLIENT_IDS, sorted(labelled)
    assert sum(client_id.startswith("kmon-cap-") for client_id in labelled) >= 90
    assert found[OTHER] >= 1

"""What a long-running kmon serve keeps of a client process once it is gone: nothing."""

from __future__ import annotations

import pytest

from kmon.engine.monitor import Monitor
from kmon.engine.sampler import ProcessSampler, SamplerSettings
from kmon.export.metrics import HostMetrics
from kmon.sources.socket_readers import open_socket_reader


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

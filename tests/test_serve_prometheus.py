"""kmon serve scraped by a real Prometheus server beside the embedded cluster's clients."""

from __future__ import annotations

import pytest
from helpers import (
    Prometheus,
    cluster_id,
    get,
    promtool,
    require_prometheus,
    start_serve,
    wait_for,
)


@pytest.fixture
def serve():
    """kmon serve polling every 250 ms (an idle reap of 5 s is seen at 90% of its limit)."""
    child, address = start_serve("--interval", "250ms")
    yield address
    child.stop()


def values(prometheus: Prometheus, expr: str) -> list[tuple[dict, float]]:
    return [(r["metric"], float(r["value"][1])) for r in prometheus.query(expr)]


@pytest.mark.integration
def test_prometheus_sees_roles_idle_reaps_and_forgets_killed_clients(start_client, serve,
                                                                      tmp_path, cluster):
    require_prometheus()
    consumer = start_client("consumer", extra_args=("--client-id", "prom-consumer"))
    start_client("producer")
    start_client("producer", idle_ms=5000, extra_args=("--client-id", "prom-reaper"))
    prometheus = Prometheus(serve, tmp_path)
    try:
        coordinator = wait_for(lambda: values(prometheus, 'kmon_connections{client_id='
                                                          '"prom-consumer",role="coordinator"}'),
                               "the consumer's coordinator connection in Prometheus")
        ((labels, count),) = coordinator
        assert labels["broker_id"] in {"1", "2", "3"} and count == 1, labels
        assert labels["state"] == "ESTABLISHED", labels
        assert labels["cluster"] == cluster_id(cluster), labels  # kmon's own query's answer
        assert labels["process"] == "workload consumer" and "pid" not in labels, labels
        (info,) = wait_for(lambda: values(prometheus, 'kmon_group_coordinator_info{client_id='
                                                      '"prom-consumer"}'),
                           "the group's coordinator as an _info series")
        assert info[0]["broker_id"] == labels["broker_id"] and info[0]["group_id"], info

        reaps = wait_for(lambda: values(prometheus, 'kmon_connections_closed_total{client_id='
                                                    '"prom-reaper",reason="client_idle_reap"}'),
                         "the reaping producer's closes counted as client idle reaps")
        assert all(lbl["closed_by"] == "client" and value >= 1 for lbl, value in reaps), reaps
        idle = values(prometheus, 'kmon_connection_idle_at_close_seconds_bucket{process='
                                  f'"workload producer",cluster="{cluster_id(cluster)}",le="10"}}')
        assert idle and sum(value for _, value in idle) >= 1, idle
        # no series names a pid, a port or a guess at the cluster
        assert not values(prometheus, '{__name__=~"kmon_.+",pid!=""}')
        clusters = {lbl["cluster"] for lbl, _ in values(prometheus, "kmon_client_processes")}
        assert not any(":" in name or "not known" in name for name in clusters), clusters

        status, _, text = get(f"http://{serve}/metrics")
        assert status == 200
        checked = promtool("check", "metrics", stdin=text)
        assert checked.returncode == 0 and not checked.stdout.strip(), checked

        consumer.proc.kill()
        wait_for(lambda: not values(prometheus, '{__name__=~"kmon_.+",client_id='
                                                '"prom-consumer"}'),
                 "the killed consumer's series gone")
        # others stay: the reaper's counters (between two reaps it may hold no connection,
        # and then has no kmon_connections series)
        assert values(prometheus, 'kmon_connections_closed_total{client_id="prom-reaper"}')
    finally:
        prometheus.stop()


@pytest.mark.integration
def test_openmetrics_when_the_scraper_asks_and_health(serve):
    status, kind, text = get(f"http://{serve}/metrics",
                             accept="application/openmetrics-text; version=1.0.0")
    assert status == 200 and kind.startswith("application/openmetrics-text"), kind
    assert text.rstrip().endswith("# EOF") and "kmon_build_info{" in text
    status, kind, text = get(f"http://{serve}/metrics")
    assert kind.startswith("text/plain") and "# TYPE kmon_poll_errors_total counter" in text
    assert wait_for(lambda: get(f"http://{serve}/healthz")[0] == 200, "healthy after a poll")
    assert get(f"http://{serve}/other")[0] == 404

"""Every label family of kmon serve's metrics is capped: the values past a cap share the
label "(other)", their series added up, and kmon_label_values_folded says how many.

Once, one process rotating its consumer groups added 8 series a second to
kmon_group_coordinator_changes_total, without end.
"""

from __future__ import annotations

import pytest
from helpers import promtool, require_prometheus
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kmon.export.collector import MAX_LABEL_VALUES, HostCollector
from kmon.export.metrics import MAX_GROUP_IDS, OTHER, HostMetrics
from kmon.model import ClientInstance, ProcessView, Snapshot

pytestmark = pytest.mark.integration  # promtool, a process


def _consumer(group: str, coordinator: int) -> ClientInstance:
    return ClientInstance(name="rdkafka#consumer-1", client_id="rotator", type="consumer",
                          group_id=group, group_coordinator_id=coordinator)


def _render(metrics: HostMetrics, collector: HostCollector | None = None
            ) -> tuple[str, dict[str, list]]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector or HostCollector(metrics))
    text = generate_latest(registry).decode()
    return text, {family.name: family.samples for family in text_string_to_metric_families(text)}


def _folded(samples: dict[str, list], label: str) -> float:
    return next((s.value for s in samples["kmon_label_values_folded"]
                 if s.labels["label"] == label), 0.0)


def test_a_process_rotating_its_groups_keeps_the_series_bounded():
    """600 polls of one process through the real HostMetrics and collector, a new group
    every second poll and its coordinator moving in between."""
    require_prometheus()
    metrics = HostMetrics(count_fds=False)
    collector = HostCollector(metrics)
    for poll in range(600):
        view = ProcessView(4242, "python", "python rotate.py",
                           clients=[_consumer(f"group-{poll // 2}", poll % 2 + 1)])
        metrics.update(Snapshot(ts_ms=1_700_000_000_000 + poll, host="h", processes=[view]),
                       [], {}, 0.0)
        text, samples = _render(metrics, collector)
    changes = samples["kmon_group_coordinator_changes"]
    groups = {s.labels["group_id"] for s in changes}
    assert len(groups) <= MAX_GROUP_IDS + 1 and OTHER in groups, len(groups)
    assert sum(s.value for s in changes) == 300  # every change still counted
    assert len(samples["kmon_group_coordinator_info"]) <= MAX_GROUP_IDS + 1
    assert _folded(samples, "group_id") >= 1
    checked = promtool("check", "metrics", stdin=text)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_each_label_keeps_at_most_its_cap_of_values_in_a_family():
    """250 processes, each in a group of its own: process and group_id values past the
    cap fold into "(other)", and no count is lost."""
    require_prometheus()
    metrics = HostMetrics(count_fds=False)
    count = MAX_LABEL_VALUES + 50
    views = [ProcessView(1000 + i, "python", f"python app-{i}.py",
                         clients=[_consumer(f"g-{i}", 1)], clients_created=1)
             for i in range(count)]
    metrics.update(Snapshot(ts_ms=1_700_000_000_000, host="h", processes=views), [], {}, 0.0)
    text, samples = _render(metrics)
    created = samples["kmon_client_instances_created"]
    assert len({s.labels["process"] for s in created}) == MAX_LABEL_VALUES + 1
    assert sum(s.value for s in created) == count
    assert len({s.labels["group_id"] for s in samples["kmon_group_coordinator_info"]}) \
        == MAX_LABEL_VALUES + 1
    assert _folded(samples, "process") == count - MAX_LABEL_VALUES
    checked = promtool("check", "metrics", stdin=text)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_processes_of_one_command_share_their_series_and_no_series_names_a_pid():
    """A pid changes with every restart and means nothing on another host: two workers
    running one command for one cluster are one set of series, counted by
    kmon_client_processes; a third, of another cluster, has its own."""
    require_prometheus()
    metrics = HostMetrics(count_fds=False)
    views = [ProcessView(pid, "python", "/venv/bin/python3 -m app.worker consume --fast",
                         clients=[_consumer("orders", 1)], clients_created=2)
             for pid in (501, 502, 503)]
    metrics.update(Snapshot(ts_ms=1_700_000_000_000, host="h", processes=views), [],
                   {501: "clusterA", 502: "clusterA", 503: "clusterB"}, 0.0)
    text, samples = _render(metrics)
    assert all("pid" not in s.labels for family in samples.values() for s in family)
    processes = {(s.labels["process"], s.labels["cluster"]): s.value
                 for s in samples["kmon_client_processes"]}
    assert processes == {("worker consume", "clusterA"): 2, ("worker consume", "clusterB"): 1}
    created = {s.labels["cluster"]: s.value for s in samples["kmon_client_instances_created"]}
    assert created == {"clusterA": 4, "clusterB": 2}
    assert len(samples["kmon_group_coordinator_info"]) == 2
    checked = promtool("check", "metrics", stdin=text)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_label_values_reach_metrics_with_their_control_characters_spelled_out():
    """A client id, a group id and a command are the watched process's to choose: ESC, C1
    and bidi codes went into /metrics as they were, and ``curl .../metrics`` in a terminal
    ran them (a cleared screen, a window title). They are spelled out, so that two values
    stay two."""
    require_prometheus()
    metrics = HostMetrics(count_fds=False)
    client = ClientInstance(name="rdkafka#consumer-1", client_id="evil\x1b]0;pwned\x07",
                            type="consumer", group_id="g\u202ex\x9b", group_coordinator_id=1)
    view = ProcessView(4242, "py\x1b[2J", "py\x1b[2J app.py", clients=[client],
                       clients_created=1)
    metrics.update(Snapshot(ts_ms=1_700_000_000_000, host="h", processes=[view]), [], {}, 0.0)
    text, samples = _render(metrics)
    assert not any(0x7f <= ord(c) < 0xa0 or ord(c) < 0x20 and c != "\n" or c == "\u202e"
                   for c in text)
    (info,) = samples["kmon_group_coordinator_info"]
    assert (info.labels["client_id"], info.labels["group_id"]) == (
        "evil\\x1b]0;pwned\\x07", "g\\u202ex\\x9b")
    checked = promtool("check", "metrics", stdin=text)
    assert checked.returncode == 0, checked.stdout + checked.stderr

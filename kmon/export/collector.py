"""The Prometheus collector: HostMetrics' latest state as metric families (prometheus_client)."""

from __future__ import annotations

import operator
import platform
import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from kmon import __version__
from kmon.export.metrics import OTHER, HostMetrics, ProcessMetrics
from kmon.present.plain_text import visible

Family = GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily | InfoMetricFamily
MAX_LABEL_VALUES = 200  # distinct values of one label in one family; more are "(other)"
# a process by what it runs and its cluster, never by its pid: series that outlive a restart
# and can be joined across hosts; processes of one command add up (kmon_client_processes)
PROCESS = ("process", "cluster")
CONNECTION = (*PROCESS, "client_id", "role", "broker_id")

# each per-process family's help, by its name after kmon_
HELP = {
    "client_processes": "Kafka client processes on this host running this command for "
                        "this cluster.",
    "connections": "Open connections of a client process, by role, broker and TCP state.",
    "connections_opened": "Connections the process opened since kmon first saw it.",
    "connections_closed": "Connections closed, by who closed them first and why.",
    "connect_failures": "Connections that never became established.",
    "connection_idle_at_close_seconds": "How long a connection had been idle when it closed.",
    "connection_max_idle_seconds": "The longest current idle age among these connections.",
    "connection_idle_limit_seconds": "The idle limit that will reap the idlest of these "
                                     "connections, and whose limit it is (limit_by).",
    "client_instances": "Kafka client instances in the process, by type.",
    "client_instances_created": "Client instances the process has created (kmon's agent).",
    "group_coordinator": "The broker coordinating a consumer group, as a member sees it.",
    "group_coordinator_changes": "Times a member saw its group's coordinator move.",
    "churn_events": "Connection patterns worth a look (kmon churn events), by pattern.",
    "process_open_fds": "File descriptors the client process holds.",
    "process_max_fds": "The process's soft limit on open file descriptors.",
    "findings": "Processes of this command with a finding of this reason now (kmon's "
                "diagnoses: docs/findings.md).",
}


OWN = ("kmon_build_info", "kmon_poll_duration_seconds", "kmon_poll_errors_total",
       "kmon_last_poll_timestamp_seconds", "kmon_watched_processes",
       "kmon_kernel_events_enabled", "kmon_label_values_folded",
       "kmon_kernel_events_lost_total")


def family_names() -> list[str]:
    """Every metric family kmon serve may expose, named as a scraper sees them."""
    families = [*_Families().all(with_empty=True)]
    return [*OWN, *(f.name + {"counter": "_total", "info": "_info"}.get(f.type, "")
                    for f in families)]


class HostCollector(Collector):
    """Every family from one consistent read of ``metrics``; a process's series vanish with
    it."""

    def __init__(self, metrics: HostMetrics) -> None:
        self.metrics = metrics
        self._cap = LabelCap()
        self._lock = threading.Lock()  # one scrape at a time moves the cap's places

    def describe(self) -> list[Metric]:
        return []  # registration must not collect

    def collect(self) -> Iterator[Metric]:
        yield from self._own()
        processes = self.metrics.processes()
        with self._lock:
            self._cap.begin()
            families = _Families(self._cap)
            for _, proc in sorted(processes.items(),
                                  key=lambda item: (item[1].process, item[1].cluster, item[0])):
                families.add_process(proc)
            out = list(families.all())
            self._cap.end()
            folded = {label: len(values) for label, values in self._cap.folded.items()}
        for proc in processes.values():
            for label, values in proc.folded.items():
                folded[label] = folded.get(label, 0) + len(values)
        gauge = GaugeMetricFamily("kmon_label_values_folded", "Distinct label values shown "
                                  'as "(other)" in this scrape, by label.', labels=["label"])
        for label, count in sorted(folded.items()):
            gauge.add_metric([label], count)
        yield gauge
        yield from out

    def _own(self) -> Iterator[Metric]:
        build = InfoMetricFamily("kmon_build", "kmon's version and Python.")
        build.add_metric([], {"version": __version__,
                              "python": platform.python_version()})
        yield build
        stats = self.metrics.poll_stats()
        duration = HistogramMetricFamily("kmon_poll_duration_seconds",
                                         "How long each poll of the host's clients took.")
        duration.add_metric([], stats.duration.buckets(), stats.duration.total)
        yield duration
        errors = CounterMetricFamily("kmon_poll_errors", "Polls that failed.")
        errors.add_metric([], stats.errors)
        yield errors
        if stats.last_success_s is not None:
            yield GaugeMetricFamily("kmon_last_poll_timestamp_seconds",
                                    "When the last successful poll ran (UTC epoch).",
                                    value=stats.last_success_s)
        yield GaugeMetricFamily("kmon_watched_processes", "Kafka client processes kmon watches.",
                                value=stats.processes)
        yield GaugeMetricFamily("kmon_kernel_events_enabled",
                                "1 when kmon reads the kernel's TCP events (CAP_PERFMON), else 0.",
                                value=int(stats.kernel_events))
        lost = CounterMetricFamily("kmon_kernel_events_lost", "Kernel TCP events dropped "
                                   "because a ring buffer was full: counts may be short.")
        lost.add_metric([], stats.kernel_lost)
        yield lost


class LabelCap:
    """At most MAX_LABEL_VALUES distinct values of each label in each family; the rest are
    "(other)". A value keeps its place while some series carries it (from scrape to
    scrape, so a counter does not jump between series); one gone frees its place."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, str], set[str]] = {}  # (family, label) -> values
        self._seen: dict[tuple[str, str], set[str]] = {}  # ... in this scrape
        self.folded: dict[str, set[str]] = {}  # label -> values folded in this scrape

    def begin(self) -> None:
        self._seen, self.folded = {}, {}

    def __call__(self, family: str, label: str, value: str) -> str:
        key = (family, label)
        kept = self._kept.setdefault(key, set())
        if value not in kept:
            if len(kept) >= MAX_LABEL_VALUES:
                self.folded.setdefault(label, set()).add(value)
                return OTHER
            kept.add(value)
        self._seen.setdefault(key, set()).add(value)
        return value

    def end(self) -> None:
        """Free the places of values no series carried in this scrape."""
        self._kept = {key: kept & self._seen.get(key, set())
                      for key, kept in self._kept.items() if key in self._seen}


class _Families:
    """Every per-process family, filled process by process through ``cap``; series that
    fold into the same labels (processes of one command, values past the cap) are added up,
    but for the idlest age (the most), the limits (the least) and an info (its first)."""

    def __init__(self, cap: LabelCap | None = None) -> None:
        self.cap = cap or LabelCap()
        # family -> labels -> a number, a histogram's (buckets, sum) or an info's dict
        self._rows: dict[str, dict[tuple[str, ...], Any]] = {}
        self._label_names: dict[str, tuple[str, ...]] = {}

        def family(kind, name: str, *extra: str, base=CONNECTION):
            self._label_names[f"kmon_{name}"] = (*base, *extra)
            return kind(f"kmon_{name}", HELP[name], labels=[*base, *extra])

        self.processes = family(GaugeMetricFamily, "client_processes", base=PROCESS)
        self.connections = family(GaugeMetricFamily, "connections", "state")
        self.opened = family(CounterMetricFamily, "connections_opened")
        self.closed = family(CounterMetricFamily, "connections_closed", "closed_by", "reason")
        self.failures = family(CounterMetricFamily, "connect_failures")
        self.idle_at_close = family(HistogramMetricFamily, "connection_idle_at_close_seconds",
                                    "role", base=PROCESS)
        self.max_idle = family(GaugeMetricFamily, "connection_max_idle_seconds")
        self.idle_limit = family(GaugeMetricFamily, "connection_idle_limit_seconds",
                                 "limit_by")
        self.clients = family(GaugeMetricFamily, "client_instances", "type", base=PROCESS)
        self.created = family(CounterMetricFamily, "client_instances_created", base=PROCESS)
        self.coordinator = family(InfoMetricFamily, "group_coordinator", "client_id",
                                  "group_id", base=PROCESS)
        self.coordinator_changes = family(CounterMetricFamily, "group_coordinator_changes",
                                          "client_id", "group_id", base=PROCESS)
        self.churn = family(CounterMetricFamily, "churn_events", "pattern", base=PROCESS)
        self.open_fds = family(GaugeMetricFamily, "process_open_fds", base=PROCESS)
        self.max_fds = family(GaugeMetricFamily, "process_max_fds", base=PROCESS)
        self.findings = family(GaugeMetricFamily, "findings", "reason", base=PROCESS)

    def _add(self, family: Family, labels: list[str], value, combine=operator.add) -> None:
        """One series' value (a number, a (buckets, sum) pair or an info dict) under its
        capped labels, combined with what the same labels hold (numbers by ``combine``)."""
        names = self._label_names[family.name]
        key = tuple(self.cap(family.name, name, visible(value_)) for name, value_ in
                    zip(names, labels, strict=True))
        if isinstance(value, dict):  # an info's values are labels too
            value = {name: visible(text) for name, text in value.items()}
        rows = self._rows.setdefault(family.name, {})
        held = rows.get(key)
        if held is None:
            rows[key] = value
        elif isinstance(value, tuple):  # a histogram: bucket by bucket
            rows[key] = ([(le, a + b) for (le, a), (_, b) in zip(held[0], value[0],
                                                                   strict=True)],
                         held[1] + value[1])
        elif not isinstance(value, dict):  # an info keeps its first
            rows[key] = combine(held, value)

    def add_process(self, proc: ProcessMetrics) -> None:
        who = [proc.process, proc.cluster]
        self._add(self.processes, who, 1)
        for (*labels, state), count in proc.connections.items():
            self._add(self.connections, [*who, *labels, state], count)
        for labels, count in proc.opened.items():
            self._add(self.opened, [*who, *labels], count)
        for (*labels, closed_by, reason), count in proc.closed.items():
            self._add(self.closed, [*who, *labels, closed_by, reason], count)
        for labels, count in proc.connect_failures.items():
            self._add(self.failures, [*who, *labels], count)
        for role, hist in proc.idle_at_close.items():
            self._add(self.idle_at_close, [*who, role], (hist.buckets(), hist.total))
        for labels, (idle_s, limit_s, limit_by) in proc.idle.items():
            self._add(self.max_idle, [*who, *labels], idle_s, max)
            if limit_s is not None:
                self._add(self.idle_limit, [*who, *labels, limit_by], limit_s, min)
        for kind, count in proc.clients.items():
            self._add(self.clients, [*who, kind], count)
        if proc.clients_created is not None:
            self._add(self.created, who, proc.clients_created)
        for (client_id, group_id), broker in proc.coordinators.items():
            self._add(self.coordinator, [*who, client_id, group_id], {"broker_id": broker})
        for (client_id, group_id), count in proc.coordinator_changes.items():
            self._add(self.coordinator_changes, [*who, client_id, group_id], count)
        for pattern, count in proc.churn.items():
            self._add(self.churn, [*who, pattern], count)
        if proc.open_fds is not None:
            self._add(self.open_fds, who, proc.open_fds)
        if proc.max_fds is not None:
            self._add(self.max_fds, who, proc.max_fds, min)
        for reason in proc.findings:
            self._add(self.findings, [*who, reason], 1)

    def all(self, with_empty: bool = False) -> Iterator[Metric]:
        for family in self._families():
            for labels, value in self._rows.get(family.name, {}).items():
                # a histogram's value is its (buckets, sum), every other kind's one value
                family.add_metric(list(labels), *(value if isinstance(value, tuple) else (value,)))
            if with_empty or family.samples:
                yield family

    def _families(self) -> list[Family]:
        return [value for value in vars(self).values() if isinstance(value, Family)]

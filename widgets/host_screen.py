"""The host view: every Kafka client process on this host, grouped by the cluster it uses.

What ``kmon`` shows with no arguments: the process table of the watch screen, its rows
under one heading per cluster (the brokers its processes are connected to), the same
event log and keys; ``enter`` attaches.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult

from kmon.engine.facade import UNKNOWN_CLUSTER, HostSession
from kmon.model import Event, ProcessView, Snapshot
from kmon.present.dashboard_settings import DashboardSettings
from kmon.widgets.footer import PriorityFooter
from kmon.widgets.list_screen import ProcessListScreen
from kmon.widgets.process_table import cluster_heading


class HostScreen(ProcessListScreen):
    """Live list of the host's Kafka client processes, by cluster."""

    TABLE_NAME = "Kafka client processes on this host, by cluster"

    def __init__(self, session: HostSession, settings: DashboardSettings) -> None:
        super().__init__(session.host, session, settings)
        self.clusters: dict[int, str] = {}

    def compose(self) -> ComposeResult:
        yield from self.status_bars()
        yield from self.process_panels(grouped=True)
        yield PriorityFooter()

    def apply(self, snapshot: Snapshot, events: list[Event]) -> None:
        self.clusters = self.session.cluster_labels(snapshot)
        super().apply(snapshot, events)

    def cluster_of(self, pid: int) -> str:
        return self.clusters.get(pid, UNKNOWN_CLUSTER)

    def group_heading(self, cluster: str, members: list[ProcessView]) -> str:
        """Its brokers; where none of its processes holds a socket to one now (an idle
        producer between reaps), the bootstrap they were given."""
        heading = cluster_heading(members)
        if any(v.summary.brokers for v in members) or cluster == UNKNOWN_CLUSTER:
            return heading
        return f"no broker connected now · bootstrap {cluster}"

    def redraw(self) -> None:
        processes = len(self.snapshot.processes) if self.snapshot else 0
        clusters = len(set(self.clusters.values()))
        heading = Text(f"kmon · {self.cluster_name}", style="bold")
        heading.append(f"\n{processes} Kafka client process{'es' * (processes != 1)} · "
                       f"{clusters} cluster{'s' * (clusters != 1)} · ")
        self.heading = heading
        self.trailer = self.recording_words()
        self.show_notices([])
        self.draw_processes()

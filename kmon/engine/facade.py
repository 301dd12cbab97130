"""The one door between the engine and the commands and screens: sessions to poll, record
and close, built in one place.

Neither the commands nor the screens build samplers, sockets or recorders themselves.
``open_session`` turns a target (kmon.engine.targets: PIDs, a cluster, the host, a
recording) and its frozen settings into a ``ProcessSession`` (processes named by PID, live
or replayed), a ``ClusterSession`` (a cluster and its local clients) or a ``HostSession``
(every Kafka client on this host); the screens call their methods from worker threads:
``poll()``, ``stop_recording()``, ``attach()``, ``refresh_cluster()``.
"""

from __future__ import annotations

from typing import overload

from kmon.engine.build import processes
from kmon.engine.cluster_watch import (
    ClusterUnanswered,
    ClusterView,
    ClusterWatcher,
    GroupRow,
    ask_cluster,
    broker_connection_counts,
    groups_coordinated,
    groups_view,
)
from kmon.engine.heap import settle_heap
from kmon.engine.host_view import UNKNOWN_CLUSTER
from kmon.engine.local_clients import ClusterSession, HostSession, LocalClients
from kmon.engine.playback import Replay, ReplayError, read_recording, recorded_interval_s
from kmon.engine.sampler import SamplerSettings
from kmon.engine.sessions import (
    AttachFailed,
    LiveSession,
    ProcessSession,
    RecordingFailed,
    SessionClosed,
    SnapshotSource,
)
from kmon.engine.targets import (
    ClusterTarget,
    EngineSettings,
    HostTarget,
    ProcessTarget,
    ReplayTarget,
    Target,
)
from kmon.sources.brokers.admin import ClusterState, refused_property
from kmon.sources.processes.process_info import exists, owner

__all__ = ["UNKNOWN_CLUSTER", "AttachFailed", "ClusterSession", "ClusterState", "ClusterTarget",
           "ClusterUnanswered", "ClusterView", "EngineSettings", "GroupRow", "HostSession",
           "HostTarget", "LiveSession", "ProcessSession", "ProcessTarget", "RecordingFailed",
           "ReplayError",
           "ReplayTarget", "SamplerSettings", "SessionClosed", "SnapshotSource", "Target",
           "ask_cluster", "broker_connection_counts", "exists", "groups_coordinated",
           "groups_view", "open_session", "owner", "read_recording", "recorded_interval_s",
           "refused_property", "settle_heap"]


@overload
def open_session(target: ProcessTarget, settings: EngineSettings = ...) -> LiveSession: ...
@overload
def open_session(target: ClusterTarget, settings: EngineSettings = ...) -> ClusterSession: ...
@overload
def open_session(target: HostTarget, settings: EngineSettings = ...) -> HostSession: ...
@overload
def open_session(target: ReplayTarget, settings: EngineSettings = ...) -> ProcessSession: ...
def open_session(target: Target, settings: EngineSettings | None = None
                 ) -> ProcessSession | LocalClients:
    """The session of every command and screen: ``target`` watched with ``settings``
    (default: kmon's defaults); close it after use. AttachFailed for a process that cannot
    be watched."""
    settings = settings or EngineSettings()
    if isinstance(target, ReplayTarget):
        return ProcessSession(Replay(target.recording), settings.interval_ms)
    if isinstance(target, HostTarget):
        return HostSession(settings, target.cluster)
    if isinstance(target, ClusterTarget):
        return ClusterSession(ClusterWatcher(target.bootstrap, dict(target.properties),
                                             timeout_s=target.timeout_s,
                                             refresh_s=target.refresh_s, name=target.name),
                              settings, target.pids)
    return processes(target, settings)

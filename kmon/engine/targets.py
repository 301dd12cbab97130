"""What a session watches (its target) and how (its frozen settings): the input of the one
engine builder, ``kmon.engine.facade.open_session``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kmon.engine.monitor import NEAR_REAP_FRACTION
from kmon.engine.playback import Recording
from kmon.engine.sampler import SamplerSettings
from kmon.model import ChurnThresholds
from kmon.sources.brokers.admin import ClusterState

DISCOVER_EVERY_S = 5.0  # how often the host is searched for new clients, by default
MAX_EVENTS = 5000  # events a session remembers, by default


@dataclass(frozen=True)
class ProcessTarget:
    """Client processes named by PID (``attach``: one; ``record --pid``, ``demo``: several)."""

    pids: tuple[int, ...]
    client_log: Path | None = None  # a Java client's log to follow
    cluster: ClusterState | None = None  # the cluster the user named, as it answered


@dataclass(frozen=True)
class ClusterTarget:
    """A cluster, and its clients on this host as they appear (``watch CLUSTER``, ``demo``'s
    dashboard, ``record -b``); ``pids``, the clients known from the start."""

    bootstrap: str
    properties: Mapping[str, str] = field(default_factory=dict)
    name: str = ""  # as the user named it (default: the bootstrap servers)
    timeout_s: float = 5.0  # for each of its answers
    refresh_s: float = 30.0  # between refreshes of its metadata
    pids: tuple[int, ...] = ()


@dataclass(frozen=True)
class HostTarget:
    """Every Kafka client process on this host (``watch``, ``ps``, ``serve``); with
    ``cluster``, the user asked for that cluster's clients (``ps -b``, ``serve -b``)."""

    cluster: ClusterState | None = None


@dataclass(frozen=True)
class ReplayTarget:
    """A recording made with ``attach --json``, played back (``replay``)."""

    recording: Recording


Target = ProcessTarget | ClusterTarget | HostTarget | ReplayTarget


@dataclass(frozen=True)
class EngineSettings:
    """What the user chose for a session (frozen): its samplers', its monitor's, how it
    reads the host. What its polls learn is the session's ``Directory``, never in here."""

    sampler: SamplerSettings = field(default_factory=SamplerSettings)
    interval_ms: int = 1000  # between polls, for a recording's rows
    near_reap_fraction: float = NEAR_REAP_FRACTION
    churn: ChurnThresholds | None = None
    max_events: int = MAX_EVENTS
    kernel_events: bool = True  # the kernel's TCP events, where kmon may read them
    socket_reader: str = "auto"  # kmon.sources.kernel.socket_readers.open_socket_reader's kind
    discover_every_s: float = DISCOVER_EVERY_S
    one_look: bool = False  # a single snapshot (``--once``): worth waiting for the names it meets

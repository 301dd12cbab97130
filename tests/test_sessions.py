"""Sessions are safe by construction: close waits for the poll under way; settings are frozen
and what polls learn is shared through one locked directory."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest
from helpers import GatedMonitor

from kmon.engine.cluster_watch import ClusterWatcher
from kmon.engine.facade import ClusterSession, ProcessSession, SessionClosed
from kmon.engine.monitor import Monitor
from kmon.engine.sampler import ProcessSampler, SamplerSettings
from kmon.sources.kernel.socket_readers import open_socket_reader

pytestmark = pytest.mark.integration  # real processes, a cluster or Spark


def process_session(pid: int) -> tuple[ProcessSession, GatedMonitor]:
    gated = GatedMonitor(Monitor([ProcessSampler(pid, open_socket_reader(),
                                                 SamplerSettings())]))
    return ProcessSession(gated), gated


def cluster_session(pid: int, bootstrap: str) -> tuple[ClusterSession, GatedMonitor]:
    session = ClusterSession(ClusterWatcher(bootstrap, {}, timeout_s=2.0, refresh_s=10.0),
                             SamplerSettings(require_kafka=False), [pid])
    session.monitor = gated = GatedMonitor(session.monitor)
    return session, gated


@pytest.fixture(scope="module")
def client(start_module_client):
    """A consumer that the module's sessions watch (none of them changes it)."""
    return start_module_client("consumer")


@pytest.mark.parametrize("make", [lambda pid, _: process_session(pid), cluster_session],
                         ids=["process", "cluster"])
def test_close_waits_for_the_poll_under_way(client, cluster, make):
    session, gated = make(client.pid, cluster)
    polled: list = []
    poller = threading.Thread(target=lambda: polled.append(session.poll()))
    poller.start()
    assert gated.entered.wait(30), "the poll never started"
    closer = threading.Thread(target=session.close)
    closer.start()
    closer.join(0.5)  # time for a close that does not wait to close the samplers
    gated.gate.set()
    poller.join(60)
    closer.join(60)
    assert gated.log == ["polled", "closed"]
    (snapshot, _), = polled
    assert [v.pid for v in snapshot.processes] == [client.pid]
    assert snapshot.processes[0].connections, "the poll read the live process's sockets"
    with pytest.raises(SessionClosed):
        session.poll()
    session.close()  # a second close is harmless
    assert gated.log == ["polled", "closed"]


def test_settings_are_frozen_and_polls_share_one_directory(client):
    settings = SamplerSettings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.broker_idle_ms = 1  # type: ignore[misc]
    samplers = [ProcessSampler(client.pid, open_socket_reader(), settings) for _ in range(2)]
    samplers[0].sample(int(time.time() * 1000))
    learned = settings.directory.learned
    assert learned, "the client's statistics named its brokers"
    learned.clear()  # a copy: the directory keeps its own
    assert settings.directory.learned == samplers[0].learned
    assert samplers[1].settings.directory is settings.directory

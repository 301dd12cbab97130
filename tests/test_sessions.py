"""Sessions are safe by construction: close waits for the poll under way; settings are frozen
and what polls learn is shared through one locked directory."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest
from helpers import GatedMonitor

from kmon.engine.directory import Directory
from kmon.engine.facade import (
    ClusterSession,
    ClusterTarget,
    EngineSettings,
    HostTarget,
    LiveSession,
    ProcessSession,
    ProcessTarget,
    SessionClosed,
    open_session,
)
from kmon.engine.monitor import Monitor
from kmon.engine.sampler import ProcessSampler, SamplerSettings
from kmon.model import ChurnThresholds
from kmon.sources.kernel.socket_readers import open_socket_reader

pytestmark = pytest.mark.integration  # real processes, a cluster or Spark


def process_session(pid: int) -> tuple[ProcessSession, GatedMonitor]:
    gated = GatedMonitor(Monitor([ProcessSampler(pid, open_socket_reader(),
                                                 SamplerSettings())]))
    return ProcessSession(gated), gated


def cluster_session(pid: int, bootstrap: str) -> tuple[ClusterSession, GatedMonitor]:
    session = open_session(ClusterTarget(bootstrap, timeout_s=2.0, refresh_s=10.0, pids=(pid,)),
                           EngineSettings(SamplerSettings(require_kafka=False)))
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
    """The settings are frozen through and through: what polls learn (brokers, names) is a
    Directory apart, shared by the samplers given it (before, the frozen settings carried
    it, and the name cache)."""
    settings = SamplerSettings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.broker_idle_ms = 1  # type: ignore[misc]
    assert {"directory", "resolver"}.isdisjoint(f.name for f in dataclasses.fields(SamplerSettings))
    directory = Directory()
    samplers = [ProcessSampler(client.pid, open_socket_reader(), settings, directory=directory)
                for _ in range(2)]
    samplers[0].sample(int(time.time() * 1000))
    learned = directory.learned
    assert learned, "the client's statistics named its brokers"
    learned.clear()  # a copy: the directory keeps its own
    assert directory.learned == samplers[0].learned
    assert samplers[1].directory is directory


def test_one_builder_gives_every_session_its_settings_and_a_directory_of_its_own(client):
    """``open_session`` builds the sessions of every command from one frozen settings: the
    config's thresholds reach each session's monitor, a process opened from the host's list
    too (before, ``attach`` from a list dropped them), and shares its list's directory;
    two sessions built from the same settings learn apart (before, the frozen settings
    carried one directory for all of them)."""
    settings = EngineSettings(SamplerSettings(require_kafka=False, wire="off"),
                              near_reap_fraction=0.5, churn=ChurnThresholds(reap_cycles=7))
    host = open_session(HostTarget(), settings)
    alone = open_session(ProcessTarget((client.pid,)), settings)
    opened = host.attach(client.pid)
    try:
        assert isinstance(alone, LiveSession) and isinstance(opened, LiveSession)
        for session in (host, alone, opened):
            assert session.monitor.fraction == 0.5
            assert session.monitor.churn.limits.reap_cycles == 7
        assert opened.monitor.samplers[client.pid].directory is host.directory
        assert alone.monitor.samplers[client.pid].directory is not host.directory
        alone.poll()
        assert alone.monitor.samplers[client.pid].directory.learned, "its brokers, named"
        assert not host.known_brokers, "learned by another session"
    finally:
        for session in (opened, alone, host):
            session.close()


@pytest.mark.root(reason="a full disk is a small tmpfs mounted for the test")
def test_a_recording_on_a_full_disk_stops_and_the_session_goes_on(client, tmp_path):
    """The dashboard's ``r`` recording on a disk that fills: each refresh failed after, though
    its poll had succeeded, and closing the session raised before its samplers and JMX
    helpers were released. Now the recording stops once, saying why, the refreshes go on,
    and a close releases the source whatever the recording does."""
    import errno
    import subprocess

    from kmon.engine.facade import RecordingFailed

    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(small)], check=True)
    try:
        for stops_in in ("poll", "close"):
            session, gated = process_session(client.pid)
            gated.gate.set()
            session.start_recording(small / f"rec-{stops_in}")
            session.poll()
            filler = small / "filler"
            with open(filler, "wb", buffering=0) as fill:
                try:
                    while True:
                        fill.write(bytes(4096))
                except OSError as err:
                    assert err.errno == errno.ENOSPC
            if stops_in == "poll":
                deadline = time.monotonic() + 30  # the recorder flushes every 10 s
                with pytest.raises(RecordingFailed, match="No space left"):
                    while time.monotonic() < deadline:
                        session.poll()
                        time.sleep(0.5)
                assert session.poll()[0].processes  # the refreshes go on, unrecorded
                session.close()
            else:
                with pytest.raises(OSError):
                    session.close()  # the recording cannot be compacted
            assert gated.log[-1] == "closed", stops_in
            filler.unlink()
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)

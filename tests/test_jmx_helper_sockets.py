"""kmon's JMX helpers' connections to a JVM are never the JVM's own connections, in any view:
another kmon command's helper (``ps``, ``--once``, ``serve``, ``record``) may connect at any
moment of a poll, and every view hides it alike."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import psutil
import pytest
from helpers import wait_for

from kmon.engine.sampler import ProcessSampler, SamplerSettings
from kmon.sources.jvm.jmx import JmxSource, is_jvm
from kmon.sources.kernel.socket_readers import open_socket_reader
from kmon.sources.kernel.sockets import TcpSocket

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("private_cache"),
              pytest.mark.skipif(shutil.which("java") is None,
                                 reason="java (a JDK 11+) is not installed: the JMX path needs it")]

IDLE_JVM = "public class Idle { public static void main(String[] a) throws Exception " \
           "{ Thread.sleep(600_000); } }\n"


class HelperBetween:
    """The real socket reader, which lets another kmon command's real JMX helper attach to
    the JVM just before it reads the JVM's sockets, once armed: the moment within a poll,
    between the JMX read and the socket read, that a loaded host gives on its own now and
    then and a test cannot otherwise choose."""

    name = "helper-between"

    def __init__(self, jvm_pid: int) -> None:
        self.real = open_socket_reader()
        self.jvm_pid = jvm_pid
        self.armed = False
        self.helper: JmxSource | None = None

    def sockets_of(self, pid: int) -> list[TcpSocket]:
        if pid == self.jvm_pid and self.armed:
            self.armed = False
            self.helper = JmxSource(pid, interval_ms=250)
            self.helper.wait_first(30)  # it has read the JVM's MBeans: its connection accepted
        return self.real.sockets_of(pid)


@pytest.fixture
def idle_jvm(tmp_path: Path):
    source = tmp_path / "Idle.java"
    source.write_text(IDLE_JVM)
    jvm = subprocess.Popen(["java", str(source)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: is_jvm(jvm.pid), "the JVM up", seconds=60)
        yield jvm.pid
    finally:
        jvm.kill()
        jvm.wait()


def test_a_helper_that_attaches_during_a_poll_is_hidden_in_that_poll(idle_jvm) -> None:
    reader = HelperBetween(idle_jvm)
    sampler = ProcessSampler(idle_jvm, reader, SamplerSettings(require_kafka=False, wire="off"))
    try:
        assert sampler.sample(0).connections == []  # its own helper attached, hidden
        reader.armed = True
        view = sampler.sample(1000)
        assert reader.helper is not None
        helper_ports = {s.local.port for s in reader.real.sockets_of(reader.helper.helper_pid)}
        # the JVM's own list, as psutil reads it (kmon's readers leave out what it accepted)
        jvm_peers = {c.raddr.port for c in psutil.Process(idle_jvm).net_connections("tcp")
                     if c.raddr}
        assert helper_ports & jvm_peers  # the other helper is connected to the JVM now
        assert view.connections == []
    finally:
        sampler.close()
        if reader.helper is not None:
            reader.helper.close()

"""The host view's search follows what changes on the host: with the kernel's TCP events, a
host where nothing connects is not searched again until the safety net is due, a process
that connects to a broker joins at the next poll by a look at it alone, a local user's
flood of connects elsewhere (the connect rings full) costs no search of the host while a
client that appears meanwhile still joins, and without the events every due poll searches
the whole host as before."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest
from helpers import FLOODER, Child, python_as, wait_for

from kmon.engine import discovery as discovery_module
from kmon.engine.directory import Directory
from kmon.engine.discovery import ClientDiscovery
from kmon.engine.host_view import KafkaProcesses
from kmon.engine.kernel_watch import KernelWatch, open_kernel_watch
from kmon.engine.monitor import Monitor
from kmon.engine.sampler import SamplerSettings
from kmon.sources.kernel.socket_readers import open_socket_reader
from kmon.sources.kernel.sockets import Endpoint

pytestmark = [pytest.mark.integration,  # a real child process, the kernel's real events
              pytest.mark.root(reason="the kernel's TCP events need root")]


class Counted(KafkaProcesses):
    """The host view's own search, its whole-host searches and its looks counted."""

    def __init__(self) -> None:
        super().__init__()
        self.searches = self.looks = 0

    def __call__(self, brokers):
        self.searches += 1
        return super().__call__(brokers)

    def check(self, strangers, brokers):
        self.looks += 1
        return super().check(strangers, brokers)


def connecting_child(port: int) -> subprocess.Popen:
    """A process (no Kafka library) that connects to the broker at ``port`` and holds it."""
    code = ("import socket, sys, time\n"
            f"s = socket.create_connection(('127.0.0.1', {port}))\n"
            "print('connected', flush=True)\n"
            "sys.stdin.read()\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "connected"
    return child


@contextlib.contextmanager
def one_followed_broker() -> Iterator[tuple[KernelWatch, Counted, Monitor, ClientDiscovery,
                                            Endpoint]]:
    """A listening "broker" on 127.0.0.1 whose port the kernel's events follow (as a known
    cluster's are), a monitor on them and a discovery due every poll, its searches counted;
    all closed after."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        broker = Endpoint("127.0.0.1", server.getsockname()[1])
        kernel, notice = open_kernel_watch([broker.port])
        if kernel is None:
            pytest.skip(notice)
        search = Counted()
        monitor = Monitor([], kernel=kernel)
        discovery = ClientDiscovery(open_socket_reader(), SamplerSettings(
            require_kafka=False, wire="off"), Directory(), every_s=0.0, find=search)
        try:
            yield kernel, search, monitor, discovery, broker
        finally:
            monitor.close()
            discovery.close()


def test_a_quiet_host_is_not_searched_again_and_a_new_client_joins_at_once():
    """The broker's port followed: another test's flood of connects elsewhere on the host (CI
    run 102) drops records of no port that matters."""
    with one_followed_broker() as (_, search, monitor, discovery, broker):
        for _ in range(4):  # every poll due (every_s 0): the old search ran each time
            discovery.update(monitor, {broker})
            monitor.poll()
        assert search.searches == 1
        child = connecting_child(broker.port)
        try:
            def joined() -> bool:
                monitor.poll()  # the kernel's events of the connect, read
                discovery.update(monitor, {broker})
                return child.pid in monitor.samplers
            wait_for(joined, "the new client to join", seconds=60, every=0.2)
            assert search.searches == 1 and search.looks >= 1
            discovery.next_full = 0.0  # the safety net, due: the whole host again
            discovery.update(monitor, {broker})
            assert search.searches == 2
        finally:
            child.stdin.close()
            child.wait()


def test_a_new_broker_s_clients_join_by_a_look_at_them_not_a_search_of_the_host():
    """A process connected to a broker before kmon knew of it (no Kafka library: only its
    connection tells it a client): once the broker is named, the processes connected to it
    are looked at alone and it joins; the host is not searched again."""
    with (socket.create_server(("127.0.0.1", 0)) as known,
          socket.create_server(("127.0.0.1", 0)) as named_later):
        child = connecting_child(named_later.getsockname()[1])
        kernel, notice = open_kernel_watch()
        if kernel is None:
            child.kill()
            pytest.skip(notice)
        search = Counted()
        monitor = Monitor([], kernel=kernel)
        discovery = ClientDiscovery(open_socket_reader(), SamplerSettings(
            require_kafka=False, wire="off"), Directory(), every_s=3600.0, find=search)
        first = Endpoint("127.0.0.1", known.getsockname()[1])
        try:
            discovery.update(monitor, {first})
            assert child.pid not in monitor.samplers
            discovery.search_now()  # as the host view does once its clients name a broker
            discovery.update(monitor, {first, Endpoint("127.0.0.1",
                                                       named_later.getsockname()[1])})
            assert child.pid in monitor.samplers
            assert (search.searches, search.looks) == (1, 1)
        finally:
            child.stdin.close()
            child.wait()
            monitor.close()
            discovery.close()


LIBRARY_CLIENT = ("import sys, confluent_kafka\n"  # librdkafka mapped, no connect at all
                  "print('READY', flush=True)\n"
                  "sys.stdin.read()\n")


def test_a_connect_flood_elsewhere_costs_no_search_and_a_new_client_still_joins(
        throwaway_user, monkeypatch):
    """Two flooders of a throwaway user connect to a closed port of their own for 8 s: the
    connect rings drop thousands of records, none of the broker's followed port. Before,
    each poll then searched the whole host (every due poll: the flooder made kmon pay a
    search a poll); now the processes new on the host are looked at alone, and a client
    that appears meanwhile (a Kafka library mapped, no connect at all: nothing but a search
    or a look finds it) joins all the same."""
    monkeypatch.setattr(discovery_module, "FULL_EVERY_S", 3600.0)  # a loaded host's slow
    # test is not to meet the safety net
    with one_followed_broker() as (kernel, search, monitor, discovery, broker):
        prefix, env = python_as(throwaway_user.pw_name)
        flooders: list[Child] = []
        client = None
        try:
            discovery.update(monitor, {broker})  # the first search
            flooders = [Child([*prefix, "-c", FLOODER, "8"], env=env) for _ in range(2)]
            for flooder in flooders:
                flooder.wait_line("READY")

            def step() -> None:
                monitor.poll()  # the kernel's events, read
                discovery.update(monitor, {broker})

            wait_for(lambda: step() or kernel.source.lost_connects > 1000,
                     "the connect rings to drop records", seconds=30, every=1.0)
            client = Child([sys.executable, "-c", LIBRARY_CLIENT])
            client.wait_line("READY")
            wait_for(lambda: step() or client.pid in monitor.samplers,
                     "the new client to join", seconds=30, every=1.0)
            assert kernel.lost == 0  # the followed ring lost nothing
            assert search.searches == 1 and search.looks >= 1
        finally:
            for child in (*flooders, *([client] if client else [])):
                child.stop()


def test_without_the_kernel_s_events_every_due_poll_searches_the_host():
    search = Counted()
    monitor = Monitor([])
    discovery = ClientDiscovery(open_socket_reader(), SamplerSettings(require_kafka=False,
                                                                      wire="off"),
                                Directory(), every_s=0.0, find=search)
    try:
        for _ in range(3):
            discovery.update(monitor, set())
        assert (search.searches, search.looks) == (3, 0)
    finally:
        discovery.close()

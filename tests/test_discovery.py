"""The search for local clients: at most every ``every_s``, and at once when its owner asks
(the host view, when its clients name brokers not seen before)."""

from __future__ import annotations

from kmon.engine.directory import Directory
from kmon.engine.discovery import ClientDiscovery
from kmon.engine.monitor import Monitor
from kmon.engine.sampler import SamplerSettings
from kmon.sources.kernel.socket_readers import open_socket_reader
from kmon.sources.kernel.sockets import Endpoint


def test_search_now_makes_the_next_update_search_however_soon():
    searched: list[set[Endpoint]] = []

    def find(brokers):  # the search itself: the host's sockets are not this test's subject
        searched.append(set(brokers))
        return set()

    settings = SamplerSettings()
    discovery = ClientDiscovery(open_socket_reader("psutil"), settings,
                                Directory(), 3600.0, find)
    monitor, broker = Monitor([]), Endpoint("127.0.0.1", 9092)
    discovery.update(monitor, {broker})
    discovery.update(monitor, {broker})  # not due for an hour
    assert searched == [{broker}]
    discovery.search_now()
    discovery.update(monitor, set())
    assert searched == [{broker}, set()]
    discovery.close()

"""The ground-truth harness's packet oracle read on its own (benchmarks/truth/): the API key
of each request a client sent, from the first bytes of its segments as tcpdump prints them,
and a socket's role from those keys."""

from __future__ import annotations

from benchmarks.truth.capture import Flow, payload
from benchmarks.truth.client_log import ClientLog
from benchmarks.truth.score import Context, Tally, packet_role


def request(key: int, size: int = 40, version: int = 3) -> bytes:
    return size.to_bytes(4, "big") + key.to_bytes(2, "big") + version.to_bytes(2, "big")


def test_requests_are_read_where_each_starts():
    flow = Flow(50000, 9092, 0.0)
    flow.request(1, request(18, size=20))  # ApiVersions, 24 bytes in all
    flow.request(25, request(3, size=30))  # Metadata
    flow.request(35, b"\xff" * 16)  # inside the Metadata request: no request starts there
    flow.request(59, request(11, size=100))  # JoinGroup
    assert flow.api_keys == {18, 3, 11}


def test_a_boundary_beyond_the_bytes_kept_is_found_again_by_a_plausible_header():
    flow = Flow(50000, 9092, 0.0)
    flow.request(1, request(3, size=20))  # its end at 25, but the next segment starts later
    flow.request(80, b"\x00\x01\x00\x00\xff\xff\x00\x00")  # an implausible key: not taken
    flow.request(90, request(12, size=50))
    assert flow.api_keys == {3, 12}


def test_payload_skips_the_ip_and_tcp_headers():
    ip = bytes([0x45]) + bytes(19)
    tcp = bytes(12) + bytes([0x80]) + bytes(19)  # data offset 8 words: 32 bytes
    assert payload(ip + tcp + request(1)) == request(1)
    assert payload(bytes(10)) == b""


def roles(keys: set[int], syn_ms: float = 5.0) -> str | None:
    flow = Flow(50000, 9092, syn_ms)
    flow.api_keys = keys
    ctx = Context({}, ClientLog([], [], [], []), {}, {9092: 2}, first_syn_ms=1.0)
    return packet_role(flow, ctx)


def test_a_sockets_role_from_its_requests():
    assert roles({18, 12}) == "coordinator:2"
    assert roles({1, 18}) == "broker:2"
    assert roles({1, 12}) == "coordinator:2 or broker:2"
    assert roles({18, 3}) is None  # metadata alone, not the first connection: untold
    assert roles({18, 3}, syn_ms=1.0) == "bootstrap"


def test_either_role_of_a_socket_used_for_both_is_right():
    tally = Tally()
    tally.add("coordinator:2 or broker:2", "broker:2", False, 1.0)
    tally.add("coordinator:2 or broker:2", "broker:1", False, 1.0)
    assert (tally.right, tally.wrong, tally.confident_wrong) == (1, 1, 1)


def test_an_unsettled_verdict_is_neither_told_nor_a_view_disagreement():
    """A '?' declines to answer: counted apart from the verdicts kmon committed to, and a
    one-shot view that leaves a socket unsettled does not contradict the stream (issue 33:
    where it cannot tell, a view says so)."""
    from collections import Counter

    from benchmarks.truth.score import (
        once_disagreements,
        ps_disagreements,
        summed_disagreements,
    )

    tally = Tally()
    tally.add("coordinator:2", "broker:2", False, 0.6)
    tally.add("bootstrap", "unknown", True, 0.3)
    tally.add("broker:1", "broker:1", False, 1.0)
    assert (tally.right, tally.wrong, tally.unsettled, tally.told) == (1, 1, 1, 2)
    stream = [{"key": "a", "role": "broker", "broker_id": 2},
              {"key": "b", "role": "coordinator", "broker_id": 2}]
    assert once_disagreements([stream], [{"key": "b", "role": "unknown", "broker_id": 2}]) == []
    assert once_disagreements([stream], [{"key": "b", "role": "broker", "broker_id": 2}]) == [
        "coordinator:2 in the stream, broker:2 in --once"]
    assert ps_disagreements([stream], {"broker": 1, "unknown": 1}) == []
    assert ps_disagreements([stream], {"broker": 2}) != []
    assert summed_disagreements([[stream]], Counter(broker=1, unknown=1)) == []
    assert summed_disagreements([[stream]], Counter(broker=2)) != []


def test_a_view_is_held_to_the_stream_s_snapshots_around_its_moment():
    """/metrics answered from a poll that saw a socket opened after the stream's last printed
    snapshot (a loaded host prints a snapshot a poll's work after its time): the stream's
    snapshots run on to the first polled after the view answered, so that they hold the
    view's moment between them, and the view agrees with them (client-idle-reap's
    'broker: 1–1 in the streams, 2 in /metrics')."""
    import threading
    from collections import Counter

    from benchmarks.truth.kmon_views import Stream
    from benchmarks.truth.score import summed_disagreements

    def record(ts_ms: int, *keys: str) -> dict:
        rows = [{"key": key, "role": "broker", "broker_id": 1} for key in keys]
        return {"ts_ms": ts_ms, "processes": [{"pid": 7, "connections": rows}], "events": []}

    stream = Stream(7, None, records=[record(1_000, "a")])
    mark = stream.mark()
    late = threading.Timer(0.3, lambda: stream.records.append(record(2_500, "a", "b")))
    late.start()
    around = stream.since(mark, through_ms=2_000)  # the view answered at 2.0 s
    late.join()
    assert summed_disagreements([around], Counter(broker=2)) == []
    assert summed_disagreements([around[:1]], Counter(broker=2)) != []  # the old window

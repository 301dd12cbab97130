"""The ground-truth harness's packet oracle read on its own (benchmarks/truth/): the API key
of each request a client sent, from the first bytes of its segments as tcpdump prints them,
and a socket's role from those keys; and the client log's oracle of an idle reap, against
the FIN the capture saw."""

from __future__ import annotations

from benchmarks.truth.capture import Flow, payload
from benchmarks.truth.client_log import ClientLog
from benchmarks.truth.score import Context, Tally, close_truth, packet_role, score_closes


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


def test_a_view_may_have_polled_a_socket_that_lived_between_the_stream_s_snapshots():
    """A client per message: serve's poll saw a socket still unnamed that opened and closed
    between two of the stream's snapshots (client-per-message's 'unknown: 0–0 in the
    streams, 1 in /metrics'). The stream's close of it allows the view one such socket, named
    or not; a second, or a role it never had, stays a disagreement."""
    from collections import Counter

    from benchmarks.truth.kmon_views import Stream
    from benchmarks.truth.score import summed_disagreements

    closed = {"kind": "closed", "pid": 7, "key": "b", "role": "bootstrap"}
    stream = Stream(7, None, records=[
        {"ts_ms": 1_000, "processes": [{"pid": 7, "connections": []}], "events": []},
        {"ts_ms": 2_000, "processes": [{"pid": 7, "connections": []}], "events": [closed]}])
    around, between = stream.since(0), stream.between(0)
    assert between == ["bootstrap"]
    assert summed_disagreements([around], Counter(unknown=1), between=between) == []
    assert summed_disagreements([around], Counter(bootstrap=1), between=between) == []
    assert summed_disagreements([around], Counter(unknown=1)) != []  # before
    assert summed_disagreements([around], Counter(unknown=2), between=between) != []
    assert summed_disagreements([around], Counter(broker=1), between=between) != []


def test_a_socket_the_stream_never_polled_may_have_any_role_in_a_view_that_did():
    """A client whose failed logins reconnect every 500 ms, in step with the stream's polls:
    the stream told each socket's life from the kernel's events, never named (no role at its
    close), and serve's poll caught one with its bootstrap requests read
    (sasl-wrong-password's 'bootstrap: 0–0 in the streams, 1 in /metrics'). The stream gave
    no verdict to contradict: any role is allowed for it, a second socket of one is not."""
    from collections import Counter

    from benchmarks.truth.kmon_views import Stream
    from benchmarks.truth.score import summed_disagreements

    unnamed = {"kind": "closed", "pid": 7, "key": "kernel:127.0.0.1:5>127.0.0.1:9"}
    stream = Stream(7, None, records=[
        {"ts_ms": 1_000, "processes": [{"pid": 7, "connections": []}], "events": []},
        {"ts_ms": 2_000, "processes": [{"pid": 7, "connections": []}], "events": [unnamed]}])
    around, between = stream.since(0), stream.between(0)
    assert between == ["unknown"]
    for role in ("bootstrap", "broker", "coordinator", "unknown"):
        assert summed_disagreements([around], Counter({role: 1}), between=between) == []
    assert summed_disagreements([around], Counter(bootstrap=2), between=between) != []


def test_a_recording_unsettled_on_a_socket_open_before_its_first_look_cannot_tell():
    """per-ip-limit: ``kmon record --pid`` first looked at the process (and opened its capture
    of it) after a client's bootstrap handshake; it showed the socket with no evidence
    (unknown) and told its close's reason unknown, where the stream, watching since before,
    said bootstrap and client_closed. A socket found at the recording's first look at the
    process: unsettled there, it says it cannot tell, as --once may. Told otherwise, or
    unsettled on a socket that opened after that look, it still disagrees."""
    from benchmarks.truth.kmon_views import with_ports
    from benchmarks.truth.score import record_disagreements

    history = {"sock:1": [(1_000, {"role": "bootstrap", "node_id": -1})]}
    told = with_ports([{"kind": "closed", "key": "sock:1", "ts_ms": 1_700, "closed_by": "client",
                        "reason": "client_closed", "local": "127.0.0.1:5000",
                        "remote": "127.0.0.1:9092"}], {})
    close = {"kind": "closed", "pid": 7, "key": "sock:1", "ts_ms": 1_700,
             "closed_by": "client", "reason": "unknown", "remote": "127.0.0.1:9092"}

    def disagreements(role: str, first_look_ms: int = 1_200) -> list[str]:
        rows = [{"pid": 7, "key": key, "ts_ms": ts_ms, "role": role,
                 "broker_id": 1 if role == "broker" else None, "local": "127.0.0.1:5000"}
                for key, ts_ms in (("sock:0", first_look_ms), ("sock:1", 1_200))]
        return [d for d in record_disagreements(history, told, rows, [close], 7)
                if "sock:0" not in d]

    assert disagreements("unknown") == []
    assert disagreements("broker") == ["sock:1: broker:1 recorded, bootstrap in the stream"]
    assert disagreements("unknown", first_look_ms=700) == [
        "sock:1: unknown recorded, bootstrap in the stream",
        "close of sock:1: client/unknown recorded, client/client_closed in the stream"]


def test_a_recording_unsettled_before_the_stream_settled_the_socket_cannot_tell():
    """sasl-wrong-password: a failing login's connection lived less than a poll. The
    recording's one look at it came right after its connect (unknown, no evidence yet); the
    stream's came 143 ms later and said bootstrap. Unsettled at a moment the stream had not
    settled it either, the recording says it cannot tell. Unsettled after the stream had
    settled it, or settled otherwise, it still disagrees."""
    from benchmarks.truth.score import record_disagreements

    history = {"sock:1": [(1_143, {"role": "bootstrap", "node_id": -1})]}
    rows = [{"pid": 7, "key": "sock:0", "ts_ms": 500, "role": "bootstrap", "node_id": -1,
             "local": "127.0.0.1:5000"}]

    def disagreements(role: str, at_ms: int) -> list[str]:
        row = {"pid": 7, "key": "sock:1", "ts_ms": at_ms, "role": role,
               "broker_id": 1 if role == "broker" else None, "local": "127.0.0.1:5001"}
        return record_disagreements(history, [], [*rows, row], [], 7)

    assert disagreements("unknown", 1_000) == []
    assert disagreements("unknown", 1_500) == [
        "sock:1: unknown recorded, bootstrap in the stream"]
    assert disagreements("broker", 1_000) == ["sock:1: broker:1 recorded, bootstrap in the stream"]


def test_a_recording_unsettled_on_a_close_before_its_first_look_cannot_tell():
    """sasl-wrong-password: ``kmon record`` started 5 ms before a failing login's connection
    opened; the connection lived 304 ms, all before the recording's first look at the
    process (535 ms after its start, where its capture of the process opens). Its kernel
    watch read the open and the broker's close; its wire read no request: it told the close
    broker/unknown, where the stream, watching since before, said broker/auth_failed. A close
    of a connection opened before that look: unsettled there, it cannot tell. Told otherwise,
    or unsettled on one opened after that look, it still disagrees."""
    from benchmarks.truth.kmon_views import with_ports
    from benchmarks.truth.score import record_disagreements

    key = "kernel:127.0.0.1:60450>127.0.0.1:60829"
    told = with_ports([{"kind": "closed", "key": key, "ts_ms": 470, "closed_ms": 470,
                        "closed_by": "broker", "reason": "auth_failed",
                        "local": "127.0.0.1:60450", "remote": "127.0.0.1:60829"}], {})
    rows = [{"pid": 7, "key": "sock:0", "ts_ms": 696, "role": "bootstrap", "node_id": -1,
             "local": "127.0.0.1:5000"}]

    def disagreements(opened_ms: int, closed_by: str, reason: str) -> list[str]:
        close = {"kind": "closed", "pid": 7, "key": key, "ts_ms": opened_ms + 304,
                 "opened_ms": opened_ms, "closed_ms": opened_ms + 304,
                 "closed_by": closed_by, "reason": reason, "remote": "127.0.0.1:60829"}
        if opened_ms != 166:
            told[0].update(ts_ms=opened_ms + 304, closed_ms=opened_ms + 304)
        return record_disagreements({}, told, rows, [close], 7)

    assert disagreements(166, "broker", "unknown") == []
    assert disagreements(166, "client", "client_closed") == [
        f"close of {key}: client/client_closed recorded, broker/auth_failed in the stream"]
    assert disagreements(800, "broker", "unknown") == [
        f"close of {key}: broker/unknown recorded, broker/auth_failed in the stream"]


# librdkafka's debug log of one handle (as a kept run of client-idle-reap under load printed
# it): a connect(), and its idle reap, logged 7.7 ms after the FIN the capture saw at
# 870.561303; then the handle's next connect()
LOG = """\
%7|1795675866.224|CONNECT|producer-1| [thrd:127.0.0.1:33847/1]: 127.0.0.1:33847/1: \
Connecting to ipv4#127.0.0.1:33847 (plaintext) with socket 6
%7|1795675870.569|FAIL|producer-1| [thrd:127.0.0.1:33847/1]: 127.0.0.1:33847/1: \
Connection max idle time exceeded (4192ms since last activity) (after 4200ms in state UP) \
(_TRANSPORT)
%7|1795675871.445|CONNECT|producer-1| [thrd:127.0.0.1:33847/1]: 127.0.0.1:33847/1: \
Connecting to ipv4#127.0.0.1:33847 (plaintext) with socket 6
"""
EPOCH_S = 1795675000


def client_close(tmp_path, fin_s: float, log: str = LOG) -> str:
    """The oracle's side/reason of a client's FIN at ``EPOCH_S + fin_s`` on the socket the
    log's first connect() made."""
    path = tmp_path / "client.log"
    path.write_text(log)
    flow = Flow(58570, 33847, (EPOCH_S + 866.2254) * 1000, accepted=True,
                first_close_by="client", first_close_kind="FIN",
                close_ms=(EPOCH_S + fin_s) * 1000)
    ctx = Context({(58570, 33847): flow}, ClientLog.read(path), {}, {33847: 1})
    return close_truth(flow, ctx)


def test_an_idle_reap_is_logged_after_its_fin_however_late(tmp_path):
    """librdkafka closes the socket, then logs "max idle time exceeded": on a loaded machine
    the line came 7.7 ms after the FIN, and it is still that socket's reap; so is one
    stamped a millisecond before it (the log cuts its time to the millisecond)."""
    assert client_close(tmp_path, 870.561303) == "client/client_idle_reap"
    assert client_close(tmp_path, 870.3) == "client/client_idle_reap"  # 269 ms late
    assert client_close(tmp_path, 870.5695) == "client/client_idle_reap"


def test_a_reap_logged_before_the_fin_or_after_the_next_connect_is_another_sockets(tmp_path):
    """A reap line before the FIN (less the log's cut millisecond) closed an earlier socket
    of the handle: this one the client closed for another reason; one after the handle's
    next connect() reaped a later socket."""
    assert client_close(tmp_path, 870.571) == "client/client_closed"
    later = LOG.replace("1795675870.569|FAIL", "1795675871.500|FAIL")
    assert client_close(tmp_path, 870.561303, later) == "client/client_closed"


TWO_HANDLES = """\
%7|1795677003.187|CONNECT|producer-1| [thrd:127.0.0.1:40099/bootstrap]: \
127.0.0.1:40099/bootstrap: Connecting to ipv4#127.0.0.1:40099 (plaintext) with socket 7
%7|1795677003.202|CONNECT|producer-1| [thrd:127.0.0.1:40099/1]: 127.0.0.1:40099/1: \
Connecting to ipv4#127.0.0.1:40099 (plaintext) with socket 5
%7|1795677008.221|FAIL|producer-1| [thrd:127.0.0.1:40099/1]: 127.0.0.1:40099/1: \
Connection max idle time exceeded (5006ms since last activity) (after 5010ms in state UP) \
(_TRANSPORT)
"""


def test_a_client_close_of_a_socket_whose_handle_is_untold_has_no_oracle(tmp_path):
    """Two handles logged their connect() 15 ms apart before the SYN, and /proc never showed
    the socket's fd (it closed before the scenario watched the process, as a kept run under
    load had it): whether its handle reaped it is unknown, not ``client_closed``; so kmon's
    reap of it is neither right nor wrong. With its fd seen, it is the reap the log tells."""
    path = tmp_path / "client.log"
    path.write_text(TWO_HANDLES)
    flow = Flow(39006, 40099, 1795677003203.017, accepted=True, first_close_by="client",
                first_close_kind="FIN", close_ms=1795677008221.6)
    log, flows = ClientLog.read(path), {(39006, 40099): flow}
    assert close_truth(flow, Context(flows, log, {}, {40099: 1})) is None
    said = {"ports": (39006, 40099), "ts_ms": 1795677008300, "closed_by": "client",
            "reason": "client_idle_reap"}
    tally = score_closes([said], Context(flows, log, {}, {40099: 1}), 0, 1 << 62)
    assert (tally.no_oracle, tally.wrong, tally.confident_wrong) == (1, 0, 0)
    seen = Context(flows, log, {(39006, 40099): 5}, {40099: 1})
    assert close_truth(flow, seen) == "client/client_idle_reap"


def test_a_close_only_the_recording_told_is_held_to_the_packets():
    """sasl-wrong-password (run 107 of a loop): a failed login's connection that lived 304 ms
    between the stream's polls and its kernel's events, told by ``kmon record`` alone,
    ``client/client_closed``; the packets and the brokers' log say a failed login. No stream
    close to hold it to, it went uncounted; now the packets hold it. A recorded close the
    stream told too stays ``record_disagreements``' (not counted twice)."""
    from benchmarks.truth.capture import Flow
    from benchmarks.truth.client_log import ClientLog
    from benchmarks.truth.score import Context, recorded_wrongs

    login = Flow(44320, 37191, 1_000.0, accepted=True, first_close_by="client",
                 first_close_kind="FIN", close_ms=1_304.0, server_bytes=835)
    ctx = Context({(44320, 37191): login}, ClientLog([], [], [], []), {}, {37191: 1},
                  auth_failures=30, sasl_ports=frozenset({37191}))
    key = "kernel:127.0.0.1:44320>127.0.0.1:37191"
    told = {"kind": "closed", "pid": 7, "key": key, "ts_ms": 1_304, "closed_ms": 1_304,
            "remote": "127.0.0.1:37191"}
    wrong = [{**told, "closed_by": "client", "reason": "client_closed"}]
    right = [{**told, "closed_by": "client", "reason": "auth_failed"}]
    unsettled = [{**told, "closed_by": "client", "reason": "unknown"}]
    assert recorded_wrongs([], wrong, 7, [], ctx) == [
        "recorded only: close of :44320>:37191: client/client_closed at confidence 1, "
        "truly client/auth_failed"]
    assert recorded_wrongs([], right, 7, [], ctx) == []
    assert recorded_wrongs([], unsettled, 7, [], ctx) == []
    stream = [{**right[0], "ports": (44320, 37191)}]
    assert recorded_wrongs([], wrong, 7, stream, ctx) == []  # the stream's pair holds it


def test_serve_s_close_kinds_are_held_to_the_packets_of_its_command_s_processes():
    """``kmon serve`` counts closes by closed_by/reason per command: a settled kind it
    counted more of than the packets hold is a close it told wrong (run 107's
    ``client/client_closed`` of a failed login, in no report before); a close both sides
    began counts for either side, one the oracle cannot tell for any kind, and an unsettled
    count is never held."""
    from collections import Counter

    from benchmarks.truth.kmon_views import connection_closes
    from benchmarks.truth.score import served_close_excess

    text = "\n".join([
        'kmon_connections_closed_total{process="producer.py",closed_by="client",'
        'reason="client_closed"} 1.0',
        'kmon_connections_closed_total{process="producer.py",closed_by="broker",'
        'reason="auth_failed"} 20.0',
        'kmon_connections_closed_total{process="producer.py",closed_by="client",'
        'reason="auth_failed"} 6.0',
        'kmon_connections_closed_total{process="producer.py",closed_by="broker",'
        'reason="unknown"} 3.0',
        'kmon_connections_closed_total{process="other",closed_by="client",'
        'reason="client_closed"} 9.0'])
    served = connection_closes(text, "producer.py")
    assert served == Counter({"client/client_closed": 1, "broker/auth_failed": 20,
                              "client/auth_failed": 6, "broker/unknown": 3})
    truths = Counter({"broker/auth_failed": 22, "both/auth_failed": 4, "client/auth_failed": 2})
    assert served_close_excess(served, truths) == [
        "closes client/client_closed: 1 in /metrics, 0 in the packets"]
    assert served_close_excess(served, truths + Counter({None: 1})) == []
    assert served_close_excess(Counter({"client/auth_failed": 7}), truths) == [
        "closes client/auth_failed: 7 in /metrics, 6 in the packets"]


def test_a_connection_only_the_stream_saw_counts_among_the_truths_serve_is_held_to():
    """node-killed/others: a reconnect the dead broker reset lived less than the owners'
    look at /proc (every 0.2 s), so nothing but kmon's kernel events tied it to the
    client; serve's one ``broker/reset`` was held to no reset at all. A flow the stream
    told a close of is the client's too (its truth still the packets')."""
    from benchmarks.truth.capture import Flow
    from benchmarks.truth.client_log import ClientLog
    from benchmarks.truth.score import Context, close_truths

    reset = Flow(41000, 9092, 1_000.0, accepted=True, first_close_by="server",
                 first_close_kind="RST", close_ms=1_020.0)
    other = Flow(41002, 9092, 1_000.0, accepted=True, first_close_by="server",
                 first_close_kind="FIN", close_ms=1_030.0)
    ctx = Context({(41000, 9092): reset, (41002, 9092): other}, ClientLog([], [], [], []),
                  {}, {9092: 1})
    assert close_truths(ctx, []) == {}  # neither seen in /proc
    told = {"ports": (41000, 9092), "ts_ms": 1_020, "closed_by": "broker", "reason": "reset"}
    assert close_truths(ctx, [told]) == {"broker/reset": 1}


def test_a_role_only_the_recording_settled_is_held_to_the_packets_not_to_the_stream():
    """A connection living less than a poll: the stream's one look at it came before its
    first request (unknown), ``kmon record``'s after one (broker:1). The stream said nothing
    to contradict: it was counted a disagreement, and the recording's role held to nothing.
    Now that role is held to the oracle the stream's are (its requests: a Fetch, broker:1);
    a role the stream settled otherwise anywhere stays a disagreement."""
    from benchmarks.truth.score import record_disagreements, recorded_role_wrongs

    flow = Flow(5001, 9092, 900.0, accepted=True)
    flow.request(1, request(1))  # Fetch
    ctx = Context({(5001, 9092): flow}, ClientLog([], [], [], []), {}, {9092: 1})
    unknown = {"role": "unknown", "node_id": None}
    rows = [{"pid": 7, "key": "sock:1", "ts_ms": 1_500, "role": "broker", "broker_id": broker,
             "confidence": 0.95, "local": "127.0.0.1:5001", "remote": "127.0.0.1:9092"}
            for broker in (1, 2)]
    history = {"sock:1": [(1_000, unknown)]}
    right, wrong = ([row] for row in rows)
    assert record_disagreements(history, [], right, [], 7) == []
    assert recorded_role_wrongs(right, history, 7, ctx) == []
    assert record_disagreements(history, [], wrong, [], 7) == []
    assert recorded_role_wrongs(wrong, history, 7, ctx) == [
        "recorded only: socket :5001>:9092 (API keys 1): broker:2 at confidence 0.95, truly "
        "broker:1"]
    named = {"sock:1": [(1_000, unknown), (4_000, {"role": "broker", "broker_id": 1})]}
    assert record_disagreements(named, [], wrong, [], 7) == [
        "sock:1: broker:2 recorded, unknown in the stream"]
    assert recorded_role_wrongs(wrong, named, 7, ctx) == []


def refused_attempt(at: str) -> str:
    """A librdkafka connect() refused at ``at`` (seconds past 1795837400), as its debug log
    tells it: the connect, then the refusal's debug and error lines."""
    head = (f"|1795837{at}|{{}}|consumer-2| [thrd:127.0.0.1:39961/bootstrap]: "
            "127.0.0.1:39961/bootstrap: ")
    refused = ("Connect to ipv4#127.0.0.1:39961 failed: Connection refused (after 0ms in "
               "state CONNECT)")
    return (f"%7{head.format('CONNECT')}Connecting to ipv4#127.0.0.1:39961 (plaintext) with "
            f"socket 7\n%7{head.format('FAIL')}{refused} (_TRANSPORT)\n"
            f"%3{head.format('FAIL')}{refused}\n")


REFUSALS = refused_attempt("478.471") + refused_attempt("478.522")


def test_another_programs_refused_connect_between_the_clients_is_not_the_clients(tmp_path):
    """cluster-stopped (f58ac14): a consumer's connects refused every 52 ms, and once a second
    another program's (``kmon serve -b``'s own query of the stopped cluster) to the same
    port between two of them. That one was within 100 ms of a refusal the client logged, so
    it counted as the client's, and as one kmon missed: 8 a run. Each logged refusal (its
    debug and error lines one) now claims one attempt, the nearest."""
    path = tmp_path / "client.log"
    path.write_text(REFUSALS)
    flows = {}
    for port, syn_ms in ((57470, 1795837478471.2), (57482, 1795837478499.1),
                         (57490, 1795837478522.3)):
        flows[(port, 39961)] = Flow(port, 39961, syn_ms, first_close_by="server",
                                    first_close_kind="RST", close_ms=syn_ms + 0.02)
    ctx = Context(flows, ClientLog.read(path), {}, {39961: 1})
    assert len(ctx.log.refused) == 2
    told = [{"ports": (port, 39961), "ts_ms": flow.close_ms, "closed_ms": flow.close_ms,
             "reason": "connect_failed"} for (port, _), flow in flows.items() if port != 57482]
    tally = score_closes(told, ctx, 0, 1 << 62)
    assert (tally.right, tally.missed) == (2, 0)

"""``kmon replay`` checks the type of every field of a recording before it shows any.

Recordings of the wrong shape (each a valid recording with one field changed, as a
fuzzer or a careless script would make them) are one clear line and exit 1, never a
traceback, whichever field is wrong; and a good recording is read a line at a time.
"""

from __future__ import annotations

import copy
import json

import pytest
from helpers import assert_one_clear_line, kmon

from kmon.engine.facade import ProcessSession
from kmon.engine.playback import Replay, ReplayError, read_recording, recorded_interval_s
from kmon.model import (
    ClientInstance,
    CloseStory,
    Connection,
    Event,
    EventKind,
    ProcessView,
    Role,
    Snapshot,
)


def good_record(ts_ms: int = 1_700_000_000_000) -> dict:
    """One line as ``kmon attach --json`` writes it, with every kind of field filled."""
    client = ClientInstance("rdkafka#consumer-1", "orders", "consumer", {"group.id": "g"},
                            stats_age_ms=5, group_id="g", group_coordinator_id=1)
    conn = Connection("sock:1", Role.COORDINATOR, 2147483646, 1, client.name,
                      "127.0.0.1:50000", "127.0.0.1:9092", "ESTABLISHED", idle_ms=10,
                      idle_limit_ms=540_000, bytes_sent=1, rtt_ms=0.5, evidence={"role": "stats"},
                      confidence=0.9, idle_limits={"client": 540_000}, idle_limit_by="client",
                      claims=[{"source": "stats", "role": "coordinator", "node_id": 2147483646,
                               "broker_id": 1, "confidence": 0.9, "detail": "pairing"}])
    record = Snapshot(ts_ms, "host", [ProcessView(42, "java", "java -jar app.jar", [client],
                                                  [conn], ["a notice"], 1)]).to_dict()
    record["events"] = [
        Event(ts_ms, EventKind.CLOSED, 42, "sock:1", Role.BROKER, 1, "127.0.0.1:9092",
              "closed", client.name, 1,
              close=CloseStory("broker", "broker_idle_reap", 600_000, 700_000)).to_dict(),
        {"ts_ms": ts_ms, "kind": "churn", "pid": 42, "key": None, "pattern": "fd_leak",
         "rate": 3.0, "window_s": 60}]
    return record


P = ("processes", 0)
C = (*P, "connections", 0)
CONFUSED = [  # (where, new value): each makes one recording
    (("ts_ms",), 1e300), (("ts_ms",), "1"), (("ts_ms",), -1), (("ts_ms",), 10 ** 30),
    (("ts_ms",), True), (("host",), 5), (("processes",), {}), (("processes",), [5]),
    ((*P, "pid"), "42"), ((*P, "pid"), 2 ** 70), ((*P, "name"), None), ((*P, "cmdline"), []),
    ((*P, "notices"), "x"), ((*P, "notices"), [1]), ((*P, "clients"), [{}]),
    ((*P, "clients", 0, "config"), {"k": 1}), ((*P, "clients", 0, "client_id"), 7),
    ((*P, "clients_created"), 1.5), ((*C, "state"), 5), ((*C, "role"), "boss"),
    ((*C, "idle_ms"), "x"), ((*C, "idle_ms"), 1e300), ((*C, "claims"), [{}]),
    ((*C, "claims", 0, "confidence"), "high"), ((*C, "claims"), {"a": 1}),
    ((*C, "evidence"), ["stats"]), ((*C, "idle_limits"), {"client": "9m"}),
    ((*C, "rtt_ms"), "fast"), ((*C, "key"), None), ((*C, "confidence"), None),
    (("events",), {}), (("events", 0, "kind"), "exploded"), (("events", 0, "detail"), 3),
    (("events", 0, "idle_before_ms"), "long"), (("events", 1, "rate"), "many"),
    (("events", 0, "pid"), None), (("events", 1), [])]


def confused(where: tuple, value) -> dict:
    record = copy.deepcopy(good_record())
    holder = record
    for step in where[:-1]:
        holder = holder[step]
    holder[where[-1]] = value
    return record


def ids(case) -> str:
    return ".".join(map(str, case[0])) + "=" + repr(case[1])[:12]


@pytest.mark.parametrize("case", CONFUSED, ids=map(ids, CONFUSED))
def test_a_field_of_the_wrong_type_is_named_when_the_recording_is_read(tmp_path, case):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(good_record(1_699_999_999_000)) + "\n"
                    + json.dumps(confused(*case)) + "\n")
    with pytest.raises(ReplayError, match=r"r\.jsonl:2 is not a kmon snapshot \(.+\)"):
        read_recording(path)


@pytest.mark.integration  # the real command line, one process a case
@pytest.mark.parametrize("case", CONFUSED[::6], ids=map(ids, CONFUSED[::6]))
def test_kmon_replay_says_which_field_in_one_line(tmp_path, case):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(confused(*case)) + "\n")
    assert_one_clear_line(kmon("replay", str(path)), 1, "r.jsonl:1 is not a kmon snapshot",
                          str(case[0][-1]))


@pytest.mark.integration  # the real command line, one process a case
@pytest.mark.parametrize("text", ['{"ts_ms": NaN, "host": "h", "processes": []}',
                                  "\xff\xfe{}", "[" * 100_000, '{"ts_ms": 1'])
def test_json_that_is_no_snapshot_is_one_line(tmp_path, text):
    path = tmp_path / "r.jsonl"
    path.write_bytes(text.encode("latin-1"))
    assert_one_clear_line(kmon("replay", str(path)), 1, "r.jsonl:1 is not a kmon snapshot")


def test_a_good_recording_plays_every_frame_and_then_holds_the_last(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(json.dumps(good_record(1_700_000_000_000 + n * 500))
                              for n in range(3)) + "\n\n")
    recording = read_recording(path)
    assert (len(recording), list(recording.pids), recorded_interval_s(recording)) == (3, [42], 0.5)
    session = ProcessSession(Replay(recording))
    times = [session.poll()[0].ts_ms for _ in range(4)]
    assert times == [1_700_000_000_000, 1_700_000_000_500, 1_700_000_001_000,
                     1_700_000_001_000]


def test_a_recording_changed_while_it_plays_is_an_error_of_that_frame(tmp_path):
    path = tmp_path / "r.jsonl"
    lines = [json.dumps(good_record(1_700_000_000_000 + n)) for n in range(2)]
    path.write_text("\n".join(lines) + "\n")
    replay = Replay(read_recording(path))
    replay.poll()
    with open(path, "r+b") as f:  # the second line's pid turns into a string, same length
        f.seek(len(lines[0]) + 1 + lines[1].index('"pid": 42'))
        f.write(b'"pid":"4"')
    with pytest.raises(ReplayError, match="r.jsonl:2 .*pid"):
        replay.poll()


def test_a_line_over_the_line_cap_is_refused_without_reading_it_whole(tmp_path, monkeypatch):
    from kmon.engine import playback as replay

    monkeypatch.setattr(replay, "MAX_LINE_BYTES", 2000)
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(good_record()) + "\n" + "x" * 5000 + "\n")
    with pytest.raises(ReplayError, match="r.jsonl:2 is longer than 2,000 bytes"):
        read_recording(path)

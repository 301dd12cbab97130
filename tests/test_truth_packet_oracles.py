"""The ground-truth harness's packet oracles on their own (benchmarks/truth/): a client that
reuses a port (a connection the broker closed leaves no TIME_WAIT on the client's side, so
the next connect to that broker may take the same 4-tuple, and be refused: kmon's close of
the first connection is scored against the first attempt, not the refused one); and the
silent-drop oracle, whose drop is lifted once kmon spoke (a resend acked after that was
unanswered while it lasted)."""

from __future__ import annotations

from benchmarks.truth.capture import LINE, Capture
from benchmarks.truth.findings import unacked_retransmits
from benchmarks.truth.score import nearest

SERVER = 44649


def packets(capture: Capture, *lines: str) -> None:
    for line in lines:
        match = LINE.match(line)
        assert match, line
        capture._segment(match)


def test_a_refused_connect_on_a_reused_port_keeps_the_closed_connection_before_it():
    capture = Capture({SERVER})
    packets(capture,
            f"100.000 IP 127.0.0.1.56290 > 127.0.0.1.{SERVER}: Flags [S], seq 1, length 0",
            f"100.001 IP 127.0.0.1.{SERVER} > 127.0.0.1.56290: Flags [S.], seq 9, ack 2, length 0",
            f"105.000 IP 127.0.0.1.{SERVER} > 127.0.0.1.56290: Flags [F.], seq 10, ack 2, length 0",
            f"105.001 IP 127.0.0.1.56290 > 127.0.0.1.{SERVER}: Flags [F.], seq 2, ack 11, length 0",
            f"106.000 IP 127.0.0.1.56290 > 127.0.0.1.{SERVER}: Flags [S], seq 5, length 0",
            f"106.000 IP 127.0.0.1.56290 > 127.0.0.1.{SERVER}: Flags [S], seq 5, length 0",
            f"106.001 IP 127.0.0.1.{SERVER} > 127.0.0.1.56290: Flags [R.], seq 0, ack 6, length 0")
    closed = {"ports": (56290, SERVER), "ts_ms": 105_200, "closed_ms": 105_000}
    refused = {"ports": (56290, SERVER), "ts_ms": 106_300, "closed_ms": 106_001}
    first, second = nearest(capture.flows, closed), nearest(capture.flows, refused)
    assert (first.first_close_by, first.refused) == ("server", False), first
    assert second.refused and second.syn_ms == 106_000, second  # its SYN sent twice: one try
    assert [f.syn_ms for f in capture.flows[(56290, SERVER)].attempts()] == [106_000, 100_000]


def test_a_retransmission_acked_once_the_drop_is_lifted_still_went_unanswered():
    lines = [f"200.000 IP 127.0.0.1.40000 > 127.0.0.1.{SERVER}: Flags [P.], seq 100:140, "
             "ack 7, win 512, length 40",
             f"200.300 IP 127.0.0.1.40000 > 127.0.0.1.{SERVER}: Flags [P.], seq 100:140, "
             "ack 7, win 512, length 40",
             # the drop lifted at 201.0; the next resend gets through and is acked
             f"201.500 IP 127.0.0.1.40000 > 127.0.0.1.{SERVER}: Flags [P.], seq 100:140, "
             "ack 7, win 512, length 40",
             f"201.501 IP 127.0.0.1.{SERVER} > 127.0.0.1.40000: Flags [.], ack 140, win 512, "
             "length 0"]
    assert unacked_retransmits(lines, until=201.0) == [f"40000>{SERVER}"]
    assert unacked_retransmits(lines) == []  # acked in the end: what the oracle said before

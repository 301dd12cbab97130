"""``advertised_unreachable`` as a pure function of a poll's look, and the failed connects
``FindingWatch`` keeps for it: when it raises, what it names, and the look-alikes that
raise nothing."""

from __future__ import annotations

from kmon.engine.findings import FAILED_WITHIN_MS, FindingWatch
from kmon.evidence.findings import Look, advertised_unreachable
from kmon.model import Connection, ConnectionLife, ProcessView, Role

FORWARDER, ADVERTISED = "127.0.0.1:9000", "10.0.0.7:9092"


def view(*connections: tuple[Role, str, str], brokers: dict[str, int] | None = None
         ) -> ProcessView:
    conns = [Connection(f"k{i}", role, None, None, None, "127.0.0.1:1", remote, state)
             for i, (role, remote, state) in enumerate(connections)]
    return ProcessView(1, "kcat", "kcat -C -b 127.0.0.1:9000 -t t", connections=conns,
                       brokers={ADVERTISED: 3} if brokers is None else brokers)


def failed(closed_ms: int, remote: str = ADVERTISED, by: str = "broker") -> ConnectionLife:
    return ConnectionLife(1, "127.0.0.1:5", remote, closed_ms, closed_ms, by, "connect_failed")


BOOTSTRAP = (Role.BOOTSTRAP, FORWARDER, "ESTABLISHED")


def test_failed_connects_to_an_advertised_address_name_broker_address_and_bootstrap():
    lives = [failed(1_000), failed(2_000), failed(4_000, by="unknown")]
    (raised,) = advertised_unreachable.find(Look(5_000, [view(BOOTSTRAP)],
                                                 failed_connects={1: lives}))
    assert raised.reason == "advertised_unreachable" and raised.key == ADVERTISED
    assert raised.evidence == {"broker_id": 3, "advertised": ADVERTISED,
                               "bootstrap": [FORWARDER], "failed_connects": 3, "refused": 2,
                               "last_failed_ms": 4_000}
    assert (f"the bootstrap {FORWARDER} answered, but broker 3's advertised address "
            f"{ADVERTISED} cannot be reached: 3 connects failed in 3 s (2 refused, 1 with no "
            "RST seen: timed out or unreachable)") == raised.detail


def test_look_alikes_raise_nothing():
    lives = {1: [failed(1_000)]}
    looks = [
        Look(2_000, [view()], failed_connects=lives),  # no bootstrap answered
        Look(2_000, [view(BOOTSTRAP, (Role.BROKER, ADVERTISED, "ESTABLISHED"))],
             failed_connects=lives),  # failed once, connected now
        Look(2_000, [view(BOOTSTRAP, brokers={})], failed_connects=lives),  # not advertised
        Look(2_000, [view(BOOTSTRAP)]),  # no connect failed
        Look(2_000, [view((Role.BOOTSTRAP, FORWARDER, "SYN_SENT"))], failed_connects=lives),
    ]
    for look in looks:
        assert advertised_unreachable.find(look) == [], look


def test_the_watch_keeps_failed_connects_for_a_minute_only():
    watch = FindingWatch()
    watch.observe(1_000, [view(BOOTSTRAP)], {}, [failed(900)])
    assert [f.reason for f in watch_findings(watch, 2_000)] == ["advertised_unreachable"]
    assert watch_findings(watch, 900 + FAILED_WITHIN_MS + 1) == []


def watch_findings(watch: FindingWatch, ts_ms: int):
    views = [view(BOOTSTRAP)]
    watch.observe(ts_ms, views, {})
    return views[0].findings

"""``coordinator_flapping``: a group's coordinator, as a member in the process sees it,
moving from broker to broker ``MOVES`` times or more within ``WINDOW_MS`` (the thresholds of
contrib/prometheus/kmon-rules.yml's KafkaGroupCoordinatorKeepsMoving). A member that loses
its coordinator and finds it on the same broker again has not seen it move."""

from __future__ import annotations

from collections.abc import Sequence

from kmon.evidence.findings.look import Look, Raised
from kmon.evidence.findings.marks import Mark

REASON = "coordinator_flapping"
MOVES = 3
WINDOW_MS = 900_000
FIX = ("look at the brokers it moved between: a coordinator moves when the leader of its "
       "__consumer_offsets partition changes (broker restarts, crashes, long GC or ZooKeeper/"
       "KRaft session expiries, controlled shutdowns in a loop, unclean leader election); "
       "check those brokers' logs and the partition's leadership (kafka-topics --describe "
       "--topic __consumer_offsets); each move costs the group a rebalance or a commit retry")


def find(look: Look) -> list[Raised]:
    """Each group member whose coordinator moved MOVES times or more within WINDOW_MS."""
    out = []
    for view in look.views:
        for member, path in paths(look.marks.get(view.pid, ())).items():
            moves = [(ts, broker) for ts, broker in path[1:] if look.ts_ms - ts <= WINDOW_MS]
            if len(moves) >= MOVES:
                out.append(_raised(view.pid, member, path[-len(moves) - 1:]))
    return out


def paths(marks: Sequence[Mark]) -> dict[tuple[str, str], list[tuple[int, str]]]:
    """Each member's coordinators in turn: (since when, broker), a new one only when the
    broker differs from the last one known."""
    out: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for mark in marks:
        for member, broker in mark.coordinators:
            path = out.setdefault(member, [])
            if not path or path[-1][1] != broker:
                path.append((mark.ts_ms, broker))
    return out


def _raised(pid: int, member: tuple[str, str], path: list[tuple[int, str]]) -> Raised:
    client_id, group_id = member
    brokers = [broker for _, broker in path]
    span_s = (path[-1][0] - path[1][0]) // 1000
    detail = (f"the coordinator of group {group_id!r} (client.id {client_id!r}) moved "
              f"{len(path) - 1} times in {span_s} s: broker {' → '.join(brokers)}")
    evidence = {"group_id": group_id, "client_id": client_id, "moves": len(path) - 1,
                "brokers": brokers, "moved_ms": [ts for ts, _ in path[1:]]}
    return Raised(pid, REASON, detail, evidence, FIX, key=f"{client_id}\0{group_id}")

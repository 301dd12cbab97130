"""Roles over TLS scored against the client's own view: ``kmon attach PID --json`` snapshot by
snapshot, and librdkafka's debug log (``debug=broker``) as one client's truth."""

from __future__ import annotations

import json
import re
import time

from support.processes import Child, attach_stream

__all__ = ["SURE", "VERDICT_S", "librdkafka_role", "librdkafka_truth", "scored_until_right",
           "check_tls_roles"]

VERDICT_S = 10.0  # the bound: every socket named right within 10 s of attach
SURE = 0.9
LIBRDKAFKA_LINE = re.compile(r"\[thrd:(?P<thread>[^\]]+)\]: (?P<name>\S+?): ")
LIBRDKAFKA_SOCKET = re.compile(r"Connecting to \S+ \((?:sasl_)?ssl\) with socket (?P<fd>\d+)")


def librdkafka_role(thread: str) -> str:
    return ("coordinator" if thread.startswith(("GroupCoordinator", "TxnCoordinator")) else
            "bootstrap" if thread.endswith("/bootstrap") else "broker")


def librdkafka_truth(client: Child):
    """librdkafka's debug log (``debug=broker``) as the truth: each socket's fd -> the role of
    the broker its thread speaks for now (a bootstrap thread takes its broker's name once the
    metadata names it) and that broker's id (``host:port/3``, ``GroupCoordinator/3``; None for
    a bootstrap)."""
    names, ids, fds = {}, {}, {}
    for line in list(client.stderr):
        match = LIBRDKAFKA_LINE.search(line)
        if match:
            names[match["thread"]] = match["name"]
            if (broker := _broker_id(match["name"])) is not None:
                ids[match["thread"]] = broker  # the logical coordinator's lines also omit it
            socket_line = LIBRDKAFKA_SOCKET.search(line)
            if socket_line:
                fds[int(socket_line["fd"])] = match["thread"]
    roles = {fd: (librdkafka_role(names[thread]), ids.get(thread))
             for fd, thread in fds.items()}
    return lambda row: roles.get(row["fd"])


def _broker_id(name: str) -> int | None:
    tail = name.rsplit("/", 1)[-1]
    return int(tail) if "/" in name and tail.isdigit() else None


def scored_until_right(pid: int, truth, *kmon_args: str) -> dict:
    """``kmon attach PID --json`` scored snapshot by snapshot against ``truth()`` (each row's
    true role, or (role, broker id), or None where the client does not name it): until every
    socket is named right at SURE or better, or VERDICT_S after the first snapshot. The tally
    of the last one, the confidently wrong rows of any (a broker id named that is not the
    client's counts as wrong), and when every socket was first right. ``kmon_args``: more
    arguments to ``kmon attach`` (``-b``/``-F`` to name broker ids)."""
    started = time.monotonic()
    stream = attach_stream(pid, "--any-process", *kmon_args, interval="500ms")
    first, confident_wrong, tally = None, [], {}
    try:
        while True:
            (process,) = json.loads(stream.wait_line("{", timeout=60))["processes"]
            now = time.monotonic()
            first = first or now
            rows, wanted = process["connections"], truth()
            scored = [(r, _role_and_id(wanted(r))) for r in rows if wanted(r) is not None]
            confident_wrong += [(r["role"], r["broker_id"], role, broker, r["confidence"])
                                for r, (role, broker) in scored
                                if r["confidence"] >= SURE and (r["role"] != role or (
                                    None not in (broker, r["broker_id"])
                                    and r["broker_id"] != broker))]
            right = [r for r, (role, _) in scored
                     if r["role"] == role and r["confidence"] >= SURE]
            ids = [r for r, (_, broker) in scored if broker is not None]
            tally = {"right": len(right), "total": len(scored), "rows": len(rows),
                     "ids_named": sum(r["broker_id"] is not None for r in ids),
                     "ids_total": len(ids),
                     "confident_wrong": confident_wrong, "notices": process["notices"],
                     "roles": [(r["role"], role, r["confidence"], r["evidence"].get("wire"))
                               for r, (role, _) in scored]}
            if scored and len(right) == len(scored) == len(rows):
                return {**tally, "verdict_s": now - first, "from_attach_s": now - started}
            if now - first > VERDICT_S:
                return {**tally, "verdict_s": None}
    finally:
        stream.stop()


def check_tls_roles(tally: dict, broker_ids: bool = False) -> None:
    """Every socket right at SURE, none confidently wrong, each named by the headers read
    inside TLS (the wire's evidence lists the APIs it saw); with ``broker_ids``, every broker
    id the client knows named too."""
    assert not tally["confident_wrong"], tally
    assert all(wire and wire != "tls" for *_, wire in tally["roles"]), tally
    assert tally["verdict_s"] is not None and tally["right"] == tally["total"] > 0, (
        json.dumps(tally))
    assert not broker_ids or tally["ids_named"] == tally["ids_total"] > 0, json.dumps(tally)
    print(f"TLS roles: {tally['right']}/{tally['total']} right, verdict in "
          f"{tally['verdict_s']:.1f}s ({tally['from_attach_s']:.1f}s from attach); broker ids "
          f"named {tally.get('ids_named', 0)}/{tally.get('ids_total', 0)}")


def _role_and_id(truth) -> tuple[str, int | None]:
    return truth if isinstance(truth, tuple) else (truth, None)

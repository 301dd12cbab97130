"""Roles over TLS scored against the client's own view: ``kmon attach PID --json`` snapshot by
snapshot, and librdkafka's debug log (``debug=broker``) as one client's truth."""

from __future__ import annotations

import json
import re
import sys
import time

from support.common import wait_for
from support.processes import Child, attach_stream

__all__ = ["ACKED_ONCE", "SURE", "VERDICT_S", "librdkafka_role", "librdkafka_truth",
           "scored_until_right", "check_tls_roles", "confluent_consumer", "kcat_consumer"]

KCAT = "/usr/bin/kcat"
VERDICT_S = 10.0  # the bound: every socket named right within 10 s of attach
SURE = 0.9
# a producer script's delivery callback: ACKED on stdout once a message is delivered
ACKED_ONCE = """
told = [False]
def delivered(err, msg):
    if err is None and not told[0]:
        told[0] = True
        print("ACKED", flush=True)
"""
# a confluent-kafka consumer with the listener's own client properties (argv[4]), more on top
CONFLUENT_KAFKA = """
import json, sys
from confluent_kafka import Consumer
config = dict(line.split("=", 1) for line in open(sys.argv[4]).read().splitlines())
consumer = Consumer({**config, **json.loads(sys.argv[5]), "bootstrap.servers": sys.argv[1],
                     "group.id": sys.argv[2], "auto.offset.reset": "earliest",
                     "debug": "broker"})
if sys.argv[6:]:  # wait to be told: kmon watches from before the first login
    print("WAITING", flush=True)
    sys.stdin.readline()
consumer.subscribe([sys.argv[3]])
read = 0
while True:
    if consumer.poll(0.2) is not None:
        read += 1
        if read == 20:
            print("READ", flush=True)
"""
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


def confluent_consumer(kafka, topic: str, listener: str, *, properties: str = "{}",
                       wait: bool = False) -> Child:
    """A confluent-kafka consumer of ``topic`` in group ``g-<topic>`` on ``kafka``'s
    ``listener`` (its client properties file), ``properties`` (JSON) on top, logging
    ``debug=broker``; prints READ once it has read 20 messages, and with ``wait`` waits to be
    told (a line on stdin) before it subscribes."""
    return Child([sys.executable, "-c", CONFLUENT_KAFKA, kafka.bootstrap(listener),
                  f"g-{topic}", topic, str(kafka.client_config(listener)), properties,
                  *(["wait"] if wait else [])])


def kcat_consumer(kafka, topic: str, listener: str) -> Child:
    """kcat in group ``g-<topic>`` on ``kafka``'s ``listener`` (its client properties file,
    ``-F``), logging ``debug=broker``, once it has read to the end of the topic's three
    partitions (stopped if it does not)."""
    client = Child([KCAT, "-b", kafka.bootstrap(listener), "-F", str(kafka.client_config(listener)),
                    "-G", f"g-{topic}", "-o", "beginning", "-d", "broker", topic])
    try:
        wait_for(lambda: sum("Reached end of topic" in line for line in client.stderr) >= 3,
                 "kcat at the end of the topic's three partitions", 60)
    except BaseException:
        client.stop()
        raise
    return client


def _broker_id(name: str) -> int | None:
    tail = name.rsplit("/", 1)[-1]
    return int(tail) if "/" in name and tail.isdigit() else None


def scored_until_right(pid: int, truth, *kmon_args: str) -> dict:
    """``kmon attach PID --json`` scored snapshot by snapshot against ``truth()`` (each row's
    true role, or (role, broker id), or None where the client does not name it): until every
    socket is named right at SURE or better by a header read inside TLS (before, the other
    evidence may name it right), or VERDICT_S after the first snapshot. The tally
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
            if scored and len(right) == len(scored) == len(rows) and all(
                    wire and wire != "tls" for *_, wire in tally["roles"]):
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

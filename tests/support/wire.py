"""What kmon's wire makes of real clients: requests on sockets, rows, packet segments."""

from __future__ import annotations

import json
import socket
import time

from support.common import wait_for
from support.processes import Child, attach_stream

__all__ = ["request_to", "rows_until", "from_start", "apis", "wire_sure", "all_named", "captured",
           "IDLE_REASONS"]


def request_to(server: socket.socket, client_id: str):
    """(a client socket connected to ``server`` that sent one Metadata request, as a
    TcpSocket, the server's end)."""
    from kmon.sources import kafka_protocol as kp
    from kmon.sources.kernel.sockets import Endpoint, TcpSocket

    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    client.sendall(kp.metadata_request(1, client_id))
    sock = TcpSocket(0, client.fileno(), Endpoint(*client.getsockname()),
                     Endpoint(*server.getsockname()), "ESTABLISHED")
    return client, sock, peer


def rows_until(stream: Child, wanted, seconds: float = 60) -> list[dict]:
    """The connections a ``kmon attach --json`` stream shows at the first poll where
    ``wanted(rows)`` holds; fails with the last rows after ``seconds`` (a hang guard)."""
    rows: list[dict] = []
    notices: set[str] = set()  # the process's, every poll's: why the wire missed, if it did
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        (process,) = json.loads(stream.wait_line("{", timeout=seconds))["processes"]
        rows = process["connections"]
        notices.update(process["notices"])
        if rows and wanted(rows):
            return rows
    shown = [(r["role"], r["node_id"], r["broker_id"], r["remote"], r["idle_ms"],
              r["evidence"].get("role"), r["evidence"].get("wire")) for r in rows]
    raise AssertionError(f"the wire never named every socket: {shown}; notices: {notices}")


def from_start(argv: list[str], wanted, env: dict | None = None) -> tuple[Child, list[dict]]:
    """A client attached before it opens a connection (a shell that execs it when told: the
    same PID): the wire sees every connection from its first request. (client, its rows)"""
    client = Child(["sh", "-c", 'read go; exec "$@"', "sh", *argv], env=env)
    stream = attach_stream(client.pid, "--any-process", interval="500ms")
    try:
        stream.wait_line("{")  # the tap is open
        client.send("go")
        return client, rows_until(stream, wanted)
    except BaseException:
        client.stop()
        raise
    finally:
        stream.stop()


def apis(row: dict) -> set[str]:
    """The API names the wire saw on a row's socket."""
    return {part.split("×")[0] for part in row["evidence"].get("wire", "").split()}


def wire_sure(row: dict) -> bool:
    """The wire's confidence in a row: 1.0, but for a connection that only looked the
    cluster up (Metadata, FindCoordinator: any broker answers them; no request only a broker,
    a coordinator or a transaction coordinator takes) once the cluster was known: 0.7 as a
    broker (or a re-bootstrap), or unsettled (role unknown, 0.3) where the process held
    nothing else when it opened (a new client's bootstrap and a reconnect look alike:
    kmon.evidence.wire)."""
    from kmon.evidence.wire import AFTER_LEARNED, KNOWING_APIS, UNPLACED
    from kmon.sources.kafka_protocol import api_name

    knowing = {api_name(key) for key in KNOWING_APIS}
    if not apis(row) & knowing and row["role"] in ("broker", "unknown"):
        return row["confidence"] == (AFTER_LEARNED if row["role"] == "broker" else UNPLACED)
    return row["confidence"] == 1.0


def all_named(rows: list[dict]) -> bool:
    """Every socket named by the wire with its broker, a coordinator among them, and a
    broker socket that fetched."""
    kafka = [r for r in rows if r["evidence"].get("role") == "wire"]
    return bool(kafka) and len(kafka) == len(rows) and all(
        r["broker_id"] is not None for r in kafka) and any(
        r["role"] == "coordinator" for r in kafka) and any(
        r["role"] == "broker" and "Fetch" in apis(r) for r in kafka)


def captured(capture, wanted, seconds: float = 10) -> list:
    """The segments a ``PacketCapture`` reads until ``wanted(segments)`` holds (the packet
    ring hands a block over when it fills or times out)."""
    segments: list = []

    def enough() -> bool:
        segments.extend(capture.read())
        return wanted(segments)

    wait_for(enough, "the segments wanted from the packet ring", seconds)
    return segments


IDLE_REASONS = {"client_idle_reap", "broker_idle_reap", "middlebox_idle_drop"}

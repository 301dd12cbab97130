"""The packet oracle: ``tcpdump`` on loopback, each TCP connection's opening and closing
packets in order, per 4-tuple, and the Kafka API keys of the requests the client sent on it
(read from the first bytes of each segment that starts a request)."""

from __future__ import annotations

import re
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

# 1795620298.156956 IP 127.0.0.1.59964 > 127.0.0.1.54403: Flags [S], seq 1, ..., length 0
LINE = re.compile(r"^(\d+\.\d+) IP6? (\S+)\.(\d+) > (\S+)\.(\d+): Flags \[([^\]]*)\]"
                  r"(?:, seq (\d+)(?::(\d+))?)?(?:, ack (\d+))?.*?length (\d+)")
HEX = re.compile(r"^\s+0x[0-9a-f]+:\s+((?:[0-9a-f]{2,4} ?)+)")
SNAP = 160  # bytes of each packet kept: the IP and TCP headers, a request's size and API key


@dataclass
class Flow:
    """One connection attempt, as its packets tell it (times in UTC epoch ms)."""

    client_port: int  # the side that sent the SYN
    server_port: int
    syn_ms: float
    accepted: bool = False  # a SYN-ACK came back
    first_close_by: str | None = None  # client or server: the first FIN or RST
    first_close_kind: str | None = None  # FIN or RST
    close_ms: float | None = None
    last_data_ms: float | None = None  # the last segment carrying payload, either way
    server_bytes: int = 0  # payload the server sent
    # both sides sent their FIN before either had the other's (its ack short of it): a
    # simultaneous close, where "who closed first" is a matter of microseconds
    simultaneous: bool = False
    first_fin_acked_by: int | None = None  # the ack that covers the first FIN
    answered: bool = False  # the other side's FIN or RST seen
    api_keys: set[int] = field(default_factory=set)  # of the requests the client sent
    next_request: int | None = None  # the relative seq where the client's next request starts
    before: Flow | None = None  # the attempt that used this 4-tuple before (a reused port)

    def attempts(self) -> list[Flow]:
        """This attempt and those before it on its 4-tuple, latest first."""
        found, flow = [], self
        while flow is not None:
            found.append(flow)
            flow = flow.before
        return found

    @property
    def refused(self) -> bool:
        """A SYN answered by a RST: never a connection (nothing listens)."""
        return not self.accepted and self.first_close_kind == "RST"

    def request(self, seq: int, payload: bytes) -> None:
        """A client segment starting at relative ``seq``: a request's API key when a request
        starts there (where the last one ended, or, once a boundary fell beyond the bytes
        kept, a plausible header: size, API key and version)."""
        if len(payload) < 8 or (self.next_request is not None and seq < self.next_request):
            return
        size, key, version = (int.from_bytes(payload[0:4], "big"),
                              int.from_bytes(payload[4:6], "big"),
                              int.from_bytes(payload[6:8], "big"))
        if seq != self.next_request and not (0 < size < 1 << 24 and key < 100 and version < 30):
            return
        self.api_keys.add(key)
        self.next_request = seq + 4 + size

    def idle_at_close_ms(self) -> float | None:
        if self.close_ms is None:
            return None
        return self.close_ms - (self.last_data_ms or self.syn_ms)


@dataclass
class Capture:
    """``tcpdump -i lo`` on the ``ports`` given (the cluster's listeners), parsed as it runs."""

    ports: set[int]
    flows: dict[tuple[int, int], Flow] = field(default_factory=dict)  # by (client, server port)
    keep: Path | None = None  # tcpdump's text, kept here as it was read (for a post-mortem)

    def start(self) -> Capture:
        expression = "tcp and (" + " or ".join(f"port {p}" for p in sorted(self.ports)) + ")"
        self.proc = subprocess.Popen(
            ["tcpdump", "-i", "lo", "-nn", "-tt", "-l", "-x", "--immediate-mode", "-s", str(SNAP),
             expression], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.ready = threading.Event()
        self.lock = threading.Lock()
        threading.Thread(target=self._wait_listening, daemon=True).start()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        if not self.ready.wait(10):
            raise RuntimeError("tcpdump did not start listening on lo")
        return self

    def _wait_listening(self) -> None:
        for line in self.proc.stderr:
            if "listening on" in line:
                self.ready.set()

    def _read(self) -> None:
        pending, data = None, bytearray()  # a client data segment's (flow, seq), its bytes
        kept = self.keep.open("w") if self.keep else None
        for line in self.proc.stdout:
            if kept:
                kept.write(line)
            if pending and (hexes := HEX.match(line)):
                data += bytes.fromhex(hexes[1].replace(" ", ""))
                continue
            if pending:
                with self.lock:
                    pending[0].request(pending[1], payload(bytes(data)))
                pending, data = None, bytearray()
            match = LINE.match(line)
            if match:
                with self.lock:
                    pending = self._segment(match)
        if kept:
            kept.close()

    def _segment(self, match: re.Match) -> tuple[Flow, int] | None:
        """Apply one packet's header line; (flow, seq) when it is a client data segment
        (its bytes follow)."""
        ts, _, sport, _, dport, flags, seq, seq_end, ack, length = match.groups()
        ts_ms, sport, dport, length = float(ts) * 1000, int(sport), int(dport), int(length)
        if flags == "S":  # a new attempt (a reused 4-tuple starts afresh, the last kept)
            before = self.flows.get((sport, dport))
            if before is not None and not before.accepted and before.close_ms is None:
                return None  # a retransmitted SYN: the same attempt
            self.flows[(sport, dport)] = Flow(sport, dport, ts_ms, before=before)
            return None
        flow = self.flows.get((sport, dport)) or self.flows.get((dport, sport))
        if flow is None:
            return None  # opened before the capture started
        from_client = sport == flow.client_port
        if flags == "S.":
            flow.accepted = True
        if length > 0 and flow.close_ms is None:
            flow.last_data_ms = ts_ms
            if not from_client:
                flow.server_bytes += length
        pending = (flow, int(seq)) if length > 0 and from_client and seq is not None else None
        if "F" not in flags and "R" not in flags:
            return pending
        side = "client" if from_client else "server"
        if flow.close_ms is None:
            flow.first_close_by, flow.close_ms = side, ts_ms
            flow.first_close_kind = "RST" if "R" in flags else "FIN"
            if "F" in flags and seq is not None:
                flow.first_fin_acked_by = int(seq_end or seq) + 1
        elif side != flow.first_close_by and not flow.answered:
            flow.answered = True
            flow.simultaneous = ("F" in flags and ack is not None
                                 and flow.first_fin_acked_by is not None
                                 and int(ack) < flow.first_fin_acked_by)
        return pending

    def stop(self) -> dict[tuple[int, int], Flow]:
        """Stop the capture; every flow seen."""
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(5)
        return self.flows


def payload(packet: bytes) -> bytes:
    """The TCP payload of an IPv4 or IPv6 packet as tcpdump ``-x`` prints it (from the IP
    header on)."""
    if len(packet) < 20:
        return b""
    ip = (packet[0] & 0x0F) * 4 if packet[0] >> 4 == 4 else 40
    if len(packet) < ip + 13:
        return b""
    return packet[ip + (packet[ip + 12] >> 4) * 4:]

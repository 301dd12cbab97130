"""The classic BPF program the wire source attaches to its packet socket.

It runs in the kernel on every packet of every interface (from the network
header: the socket is ``SOCK_DGRAM``) and keeps only TCP segments of the
watched process's local ports, or to and from its brokers' ports (a connection
opened since the filter was built), cut short. While it has neither (a process
that has not connected yet), it keeps request headers from any port, so that a
new client's first requests are seen; while the brokers are being learned
(``any_requests``), the opening requests (ApiVersions, Metadata) of any port, so
that a connection to a broker no poll followed yet is seen from its start. Never
more than a header:

* from the process (requests): only segments that start with a plausible Kafka
  request header, cut after that header and its client_id (at most 14 + 255
  bytes) — never the request body, so a SaslAuthenticate's credentials never
  leave the kernel — and segments that start with a TLS record, cut after 4
  bytes; the rest of a long request never reaches kmon;
* to the process (responses), only while kmon is learning the brokers: the
  headers and ``RESPONSE_BYTES`` of the response (the Metadata brokers and the
  FindCoordinator answer come first);
* in either direction, a segment that opens, closes or resets its connection (SYN, FIN
  or RST): its headers only, so kmon knows where a connection starts (a 4-tuple the
  client reuses is a new stream) and which side closed first and how;
* everything else is dropped: segments without payload (pure ACKs), IP
  fragments, loopback's outgoing copy of each packet (it is seen again as
  incoming).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from kmon.sources.kafka_protocol import (
    API_VERSIONS,
    MAX_API_KEY,
    MAX_API_VERSION,
    MAX_CLIENT_ID,
    METADATA,
    REQUEST_HEADER,
)

OPENING_APIS = (API_VERSIONS, METADATA)  # a new connection's first request: one of these
RESPONSE_BYTES = 1024
TLS_BYTES = 4
TLS_RECORD_TYPES = (0x15, 0x16, 0x17)  # alert, handshake, application data
TCP_FIN, TCP_SYN, TCP_RST = 0x01, 0x02, 0x04
TCP_CLOSING = TCP_FIN | TCP_RST
TCP_CONTROL = TCP_CLOSING | TCP_SYN  # kept as headers only, in either direction
PORTS_PER_BLOCK = 100  # conditional jumps reach 255 instructions ahead
MAX_PORTS = 1500  # the kernel takes 4096 instructions

# opcodes (linux/filter.h)
LD_W_ABS, LD_H_ABS, LD_B_ABS = 0x20, 0x28, 0x30
LD_H_IND, LD_B_IND = 0x48, 0x50
LDX_B_MSH, LDX_IMM = 0xB1, 0x01
ALU_ADD_K, ALU_ADD_X, ALU_RSH_K, ALU_AND_K = 0x04, 0x0C, 0x74, 0x54
JA, JEQ_K, JGT_K, JSET_K = 0x05, 0x15, 0x25, 0x45
RET_K, RET_A = 0x06, 0x16
TAX, TXA = 0x07, 0x87
SKF_AD_PKTTYPE = 0xFFFFF000 + 4
SKF_AD_IFINDEX = 0xFFFFF000 + 8
PACKET_OUTGOING = 4


class _Program:
    """A BPF program under construction, with labels for forward jumps."""

    def __init__(self) -> None:
        self.code: list[list] = []  # [opcode, jt, jf, k]; jt/jf/k may be label names
        self.labels: dict[str, int] = {}

    def op(self, code: int, k: int | str = 0, jt: int | str = 0, jf: int | str = 0) -> None:
        self.code.append([code, jt, jf, k])

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def assemble(self) -> list[tuple[int, int, int, int]]:
        out = []
        for at, (code, jt, jf, k) in enumerate(self.code):
            def rel(target: int | str, at: int = at) -> int:
                return self.labels[target] - at - 1 if isinstance(target, str) else target

            if code == JA:
                k = rel(k)
            jt, jf = rel(jt), rel(jf)
            if not (0 <= jt <= 255 and 0 <= jf <= 255):
                raise ValueError("a BPF jump out of reach")
            out.append((code, jt, jf, k & 0xFFFFFFFF))
        return out


def _port_match(prog: _Program, ports: list[int], matched: str, name: str) -> None:
    """Jump to ``matched`` when the port in A is one of ``ports``; else fall through."""
    for block_start in range(0, len(ports), PORTS_PER_BLOCK):
        block = ports[block_start:block_start + PORTS_PER_BLOCK]
        hit = f"{name}-hit-{block_start}"
        after = f"{name}-miss-{block_start}"
        for port in block:
            prog.op(JEQ_K, port, jt=hit)
        prog.op(JA, after)
        prog.label(hit)
        prog.op(JA, matched)
        prog.label(after)


def _to_payload(prog: _Program) -> None:
    """X (the IP header's length) becomes the start of the TCP payload."""
    prog.op(LD_B_IND, 12)  # data offset in the high nibble
    prog.op(ALU_RSH_K, 2)
    prog.op(ALU_AND_K, 0x3C)
    prog.op(ALU_ADD_X)
    prog.op(TAX)


def _request_header(prog: _Program, name: str, not_one: str) -> None:
    """At the payload (X): keep a plausible Kafka request header and its client_id, else jump
    to ``not_one``; ``name`` prefixes its one label."""
    prog.op(LD_H_IND, 4)  # api_key
    prog.op(JGT_K, MAX_API_KEY, jt=not_one)
    prog.op(LD_H_IND, 6)  # api_version
    prog.op(JGT_K, MAX_API_VERSION, jt=not_one)
    prog.op(LD_H_IND, 12)  # client_id length (0xffff: null)
    prog.op(JEQ_K, 0xFFFF, jt=f"{name}no-client-id")
    prog.op(JGT_K, MAX_CLIENT_ID, jt=not_one)
    prog.op(ALU_ADD_K, REQUEST_HEADER)
    prog.op(ALU_ADD_X)
    prog.op(RET_A)
    prog.label(f"{name}no-client-id")
    prog.op(TXA)
    prog.op(ALU_ADD_K, REQUEST_HEADER)
    prog.op(RET_A)


def build(local_ports: Iterable[int], remote_ports: Iterable[int], loopback_ifindex: int,
          responses: bool = True, any_requests: bool = False) -> list[tuple[int, int, int, int]]:
    """The program keeping the segments of ``local_ports`` and of ``remote_ports``; with
    neither, the request headers of any port, and with ``any_requests``, those of any port's
    opening requests (see the module docstring); responses only if ``responses``."""
    remote = sorted(set(remote_ports))[:MAX_PORTS // 4]
    local = sorted(set(local_ports))[:MAX_PORTS - len(remote)]
    prog = _Program()
    # loopback's outgoing copy: drop (its incoming copy follows)
    prog.op(LD_W_ABS, SKF_AD_PKTTYPE)
    prog.op(JEQ_K, PACKET_OUTGOING, jf="ip")
    prog.op(LD_W_ABS, SKF_AD_IFINDEX)
    prog.op(JEQ_K, loopback_ifindex, jt="early-drop")
    prog.label("ip")
    prog.op(LD_B_ABS, 0)
    prog.op(ALU_RSH_K, 4)
    prog.op(JEQ_K, 4, jt="ipv4")
    prog.op(JEQ_K, 6, jf="early-drop")
    # IPv6: TCP right after the fixed header (no extension headers)
    prog.op(LD_B_ABS, 6)
    prog.op(JEQ_K, 6, jf="early-drop")
    prog.op(LDX_IMM, 40)
    prog.op(JA, "ports")
    prog.label("ipv4")
    prog.op(LD_B_ABS, 9)
    prog.op(JEQ_K, 6, jf="early-drop")
    prog.op(LD_H_ABS, 6)
    prog.op(JSET_K, 0x3FFF, jt="early-drop")  # a fragment (offset or more-fragments)
    prog.op(LDX_B_MSH, 0)  # X = IPv4 header length
    prog.op(JA, "ports")
    prog.label("early-drop")
    prog.op(RET_K, 0)
    prog.label("ports")
    if not local and not remote:  # no socket yet: its first requests, from whichever port
        prog.op(JA, "request")
    prog.op(LD_H_IND, 0)  # source port: from the process
    _port_match(prog, local, "request", "src-local")
    prog.op(LD_H_IND, 2)  # destination port: to the process
    _port_match(prog, local, "response", "dst-local")
    _port_match(prog, remote, "request", "dst-remote")  # to a broker
    prog.op(LD_H_IND, 0)
    _port_match(prog, remote, "response", "src-remote")  # from a broker
    prog.op(JA, "any-port" if any_requests else "drop")
    # X = start of the TCP payload: X + data offset * 4
    for kind in ("request", "response", "any-port"):
        prog.label(kind)
        prog.op(LD_B_IND, 13)  # the TCP flags: an open, a close or a reset keeps its headers
        # (of a port not followed, none: another process's closes are not the tap's to read)
        prog.op(JSET_K, TCP_CONTROL, jt="drop" if kind == "any-port" else "control")
        _to_payload(prog)
        prog.op(LD_H_IND, 0)  # a load past the packet's end drops it: no pure ACKs
        prog.op(JA, f"{kind}-body")
    prog.label("control")
    _to_payload(prog)
    prog.op(TXA)
    prog.op(RET_A)
    prog.label("request-body")
    _request_header(prog, "", not_one="tls")
    prog.label("any-port-body")  # a connection's opening request's header, else nothing
    prog.op(LD_H_IND, 4)  # api_key (a busy host's Produce and Fetch would fill the ring)
    for api in OPENING_APIS:
        prog.op(JEQ_K, api, jt="any-opening")
    prog.op(JA, "drop")
    prog.label("any-opening")
    _request_header(prog, "any-", not_one="drop")
    prog.label("tls")  # a TLS record's type and version, else the middle of a request
    prog.op(LD_B_IND, 1)
    prog.op(JEQ_K, 3, jf="drop")
    prog.op(LD_B_IND, 0)
    for record_type in TLS_RECORD_TYPES:
        prog.op(JEQ_K, record_type, jt="tls-record")
    prog.op(JA, "drop")
    prog.label("tls-record")
    prog.op(TXA)
    prog.op(ALU_ADD_K, TLS_BYTES)
    prog.op(RET_A)
    prog.label("response-body")
    if responses:
        prog.op(TXA)
        prog.op(ALU_ADD_K, RESPONSE_BYTES)
        prog.op(RET_A)
    prog.label("drop")
    prog.op(RET_K, 0)
    return prog.assemble()


def pack(program: list[tuple[int, int, int, int]]) -> bytes:
    """The program as the kernel's ``struct sock_filter`` array."""
    return b"".join(struct.pack("HBBI", *insn) for insn in program)

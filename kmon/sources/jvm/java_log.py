"""A Java Kafka client's log: connection lines, followed like ``tail -F``.

The Java client (NetworkClient, Selector, the coordinators) logs when it opens
and closes each connection, by node id and ``host:port``. This module reads
those lines (formats and their Kafka versions in docs/java-log.md) into events
and follows a log file across rotation; it assigns no roles (the evidence layer
folds the events into each client's node table). The log layout before the message
is the user's: a line is recognised by the text of its message, never by column.
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import BinaryIO, Literal, TypedDict

from kmon.classify import MAX_BROKER_ID, MAX_INT, java_node_id
from kmon.sources.kernel.sockets import MAX_PORT
from kmon.sources.text import decoded

LogEventKind = Literal["connecting", "connected", "disconnected", "connect_failed", "idle_close",
                    "coordinator", "coordinator_lost", "metadata_request", "io"]
ClientType = Literal["producer", "consumer", "admin"]


@dataclass(frozen=True)
class JavaLogEvent:
    """One connection fact read from a log line.

    ``node_id`` is always the Java client's connection id (bootstrap ``-1…``,
    group coordinator ``2147483647 - brokerId``, else the broker id).
    """

    kind: LogEventKind
    node_id: int | None = None
    host: str | None = None
    port: int | None = None
    address: str | None = None  # resolved ip, from "using address host/ip" or "(host/ip:port)"
    client_id: str | None = None
    group_id: str | None = None
    client_type: ClientType | None = None
    ts_ms: int | None = None  # from the line's timestamp; the follower fills in the read time
    idle_ms: int | None = None  # how long the connection had been idle when closed
    coordinator_type: CoordinatorType | None = None
    detail: str | None = None  # why a connection closed, when the line says
    raw: str = ""


# --- the line parser ---------------------------------------------------------

_TIMESTAMP = re.compile(
    r"\s*\[?(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?"
    r"(Z|[+-]\d\d:?\d\d)?(?![\d:])")
_CONTEXT = re.compile(
    r"\[(?P<type>Consumer|ShareConsumer|Producer|AdminClient) (?P<fields>\w+=[^\]]*)\] ")
_CONTEXT_FIELD = re.compile(r"(?<!\w)(\w+)=([^,]*)(?:, |$)")
_CLIENT_TYPES: dict[str, ClientType] = {"Consumer": "consumer", "ShareConsumer": "consumer",
                                        "Producer": "producer", "AdminClient": "admin"}

# Node.toString: "host:port (id: N rack: R)"; 4.x adds " isFenced: B" before ")". A 4.x
# client's group coordinator connection is "+B" (B the broker id) where 3.x has MAX_INT - B.
_ID = r"(?P<id>[+-]?\d{1,10})"
_NODE = rf"(?P<host>\S+?):(?P<port>\d{{1,5}}) \(id: {_ID} rack: \S+?(?: [^()]*)?\)"
# A line is its client's to write (up to 1 MiB): each pattern reads it in one pass. A node's
# text in a rule's first look is this long at most (a host name is 253 characters), the
# client's context is within this many characters of the line's start, and a rule's full
# pattern is tried once, where its first look found it.
_SPAN = r".{0,512}"
CONTEXT_WITHIN = 4096
# InetSocketAddress.toString: "host/ip:port", "/ip:port", "host/<unresolved>:port".
_SOCKET = r"\((?P<socket>[^()]*)\)"

CoordinatorType = Literal["group", "transaction"]


class Fields(TypedDict, total=False):
    """The fields of a JavaLogEvent a line's message gives, by name."""

    node_id: int | None
    host: str
    port: int
    address: str | None
    idle_ms: int
    coordinator_type: CoordinatorType


class ClientFields(TypedDict, total=False):
    """The fields of a JavaLogEvent a line's LogContext prefix gives, by name."""

    client_type: ClientType
    client_id: str | None
    group_id: str | None


@dataclass(frozen=True)
class _Rule:
    """A line type: ``loose`` says the line is of this type, ``strict`` reads it."""

    loose: re.Pattern[str]
    strict: re.Pattern[str]
    kind: LogEventKind
    detail: str | None = None
    extra: Callable[[re.Match[str]], Fields] | None = None


def _node_fields(m: re.Match[str]) -> Fields:
    groups = m.groupdict()
    fields: Fields = {"node_id": java_node_id(groups["id"])}
    if groups.get("host") is not None:
        fields["host"] = groups["host"]
        fields["port"] = int(groups["port"])
        if fields["port"] > MAX_PORT:  # no socket has it: the line is unread
            fields["node_id"] = None
    if groups.get("addr"):
        fields["address"] = groups["addr"].rpartition("/")[2] or None
    if groups.get("socket"):
        fields.update(_socket_fields(groups["socket"]))
    if groups.get("idle"):
        fields["idle_ms"] = int(groups["idle"])
    return fields


def _socket_fields(text: str) -> Fields:
    host, slash, rest = text.rpartition("/")
    ip, colon, port = (rest if slash else text).rpartition(":")
    if (not colon or not port.isascii() or not port.isdigit()  # "²": a digit int() refuses
            or len(port) > 5 or int(port) > MAX_PORT):
        return {}
    ip = ip.strip("[]")
    fields: Fields = {"port": int(port)}
    if slash and host:
        fields["host"] = host
    if slash and ip and ip != "<unresolved>":
        fields["address"] = ip
    elif not slash and ip:
        fields["host"] = ip
    return fields


def _new_consumer_coordinator(m: re.Match[str]) -> Fields:
    # The 3.7+ CoordinatorRequestManager logs the FindCoordinator response, whose
    # nodeId is the broker's id: the connection id is derived here, as the client does.
    broker, port = int(m["broker"]), int(m["cport"])
    if broker > MAX_BROKER_ID or port > MAX_PORT:  # no broker, no socket: the line is unread
        return {"node_id": None}
    return {"node_id": MAX_INT - broker, "host": m["chost"], "port": port}


def _rule(loose: str, strict: str, kind: LogEventKind, detail: str | None = None,
          extra: Callable[[re.Match[str]], Fields] | None = None) -> _Rule:
    return _Rule(re.compile(loose), re.compile(strict), kind, detail, extra)


_RULES: tuple[_Rule, ...] = (
    _rule(r"Initiating connection to node ",
          rf"Initiating connection to node {_NODE}(?: using address (?P<addr>\S*))?",
          "connecting"),
    _rule(r"Completed connection to node ",
          rf"Completed connection to node {_ID}\. (?:Fetching API versions|Ready)\.", "connected"),
    _rule(r"Idle connection to node \S+ disconnected",
          rf"Idle connection to node {_ID} disconnected\.", "idle_close", "idle"),
    _rule(r"About to close the idle connection from ",
          rf"About to close the idle connection from {_ID} due to being idle for "
          r"(?P<idle>\d{1,18}) millis",
          "idle_close", "idle"),
    _rule(r"\bNode \S+ disconnected\.", rf"\bNode {_ID} disconnected\.", "disconnected"),
    _rule(rf"Bootstrap broker {_SPAN} disconnected", rf"Bootstrap broker {_NODE} disconnected",
          "disconnected", "bootstrap broker disconnected"),
    _rule(r"Disconnecting from node \S+ due to request timeout",
          rf"Disconnecting from node {_ID} due to request timeout", "disconnected",
          "request timeout"),
    _rule(r"Disconnecting from node \S+ due to socket connection setup timeout",
          rf"Disconnecting from node {_ID} due to socket connection setup timeout",
          "connect_failed", "connection setup timeout"),
    _rule(r"Client requested (?:disconnect|connection close) from node [+-]?\d+(?![\d,])",
          rf"Client requested (?:disconnect|connection close) from node {_ID}\b"
          r"(?!, which is already disconnected)", "disconnected", "client requested"),
    _rule(r"Manually disconnected from ", rf"Manually disconnected from {_ID}\.", "disconnected",
          "client requested"),
    _rule(rf"Connection to node \S+ \({_SPAN}\) could not be established",
          rf"Connection to node {_ID} {_SOCKET} could not be established", "connect_failed",
          "could not be established"),
    _rule(rf"Connection to node \S+ \({_SPAN}\) (?:terminated during|failed) authentication",
          rf"Connection to node {_ID} {_SOCKET} (?:terminated during|failed) authentication",
          "connect_failed", "authentication"),
    _rule(r"Error connecting to node ", rf"Error connecting to node {_NODE}", "connect_failed",
          "error connecting"),
    _rule(r"Discovered group coordinator Coordinator\(",
          r"Discovered group coordinator Coordinator\(key=.*?, nodeId=(?P<broker>\d{1,10}), "
          r"host='(?P<chost>[^']*)', port=(?P<cport>\d{1,5})",
          "coordinator", extra=_new_consumer_coordinator),
    _rule(r"Discovered (?:group|transaction) coordinator ",
          rf"Discovered (?P<ctype>group|transaction) coordinator {_NODE}", "coordinator"),
    _rule(rf"Group coordinator {_SPAN} is unavailable or invalid",
          rf"Group coordinator {_NODE} is unavailable or invalid", "coordinator_lost"),
    _rule(r"Sending metadata request ", rf"Sending metadata request .* to node {_NODE}",
          "metadata_request"),
    # NetworkClient at DEBUG tells every request it sends and every response it reads.
    _rule(r"Sending [A-Z_]+ request with header ",
          rf"Sending [A-Z_]+ request with header RequestHeader\(.*?\) and timeout \d+ "
          rf"to node {_ID}:", "io", "sent"),
    _rule(r"Received [A-Z_]+ response from node ",
          rf"Received [A-Z_]+ response from node {_ID} for request", "io", "received"),
)
_ANY_RULE = re.compile("|".join(f"(?:{rule.loose.pattern})" for rule in _RULES))


def parse_timestamp(line: str) -> int | None:
    """UTC epoch ms of a timestamp at the start of ``line`` (naive times are local), or None."""
    m = _TIMESTAMP.match(line)
    if not m:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    frac, zone = m.group(7), m.group(8)
    tz: timezone | None = None
    if zone == "Z":
        tz = timezone.utc
    elif zone:
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        tz = timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))
    try:
        whole = datetime(year, month, day, hour, minute, second, tzinfo=tz)
    except ValueError:
        return None
    return int(whole.timestamp()) * 1000 + (int(frac[:3].ljust(3, "0")) if frac else 0)


def _context(line: str) -> tuple[ClientFields, int]:
    """The client fields of a LogContext prefix, and where the message starts."""
    m = _CONTEXT.search(line, 0, CONTEXT_WITHIN)
    if not m:
        return {}, 0
    values = dict(_CONTEXT_FIELD.findall(m["fields"]))
    group = values.get("groupId")
    return ({"client_type": _CLIENT_TYPES[m["type"]], "client_id": values.get("clientId"),
             "group_id": None if group in (None, "", "null") else group}, m.end())


def _match(line: str) -> tuple[JavaLogEvent | None, bool]:
    """The event of ``line``, and whether the line is of a known connection type."""
    if not _ANY_RULE.search(line):
        return None, False
    client, start = _context(line)
    message = line[start:]
    recognised = False
    for rule in _RULES:
        found = rule.loose.search(message)
        if found is None:
            continue
        recognised = True
        m = rule.strict.match(message, found.start())
        if m is None:
            continue
        fields = rule.extra(m) if rule.extra else _node_fields(m)
        if fields["node_id"] is None:
            continue
        ctype = m.groupdict().get("ctype")
        if rule.kind == "coordinator":
            fields["coordinator_type"] = "transaction" if ctype == "transaction" else "group"
        return JavaLogEvent(kind=rule.kind, detail=rule.detail, ts_ms=parse_timestamp(line),
                            raw=line, **client, **fields), True
    return None, recognised


def parse_line(line: str) -> JavaLogEvent | None:
    """The connection event a Java client log line reports, or None."""
    return _match(line.rstrip("\r\n"))[0]


# --- following a file --------------------------------------------------------

_MAX_LINE = 1 << 20  # a "line" this long with no newline is cut, to bound memory


class LogFollower:
    """Follows a log file like ``tail -F`` and parses its new complete lines.

    Survives rotation by rename (the old file is read to its end, then the new one
    from its start) and copytruncate (a shrunk file is read again from its start).
    Never raises for file trouble: ``problem`` says what is wrong, ``None`` when fine.
    Counters: ``parsed`` (lines that gave an event), ``unparsed`` (connection lines
    of a known type that could not be read: format drift) and ``ignored`` (the rest).
    """

    def __init__(self, path: str | os.PathLike[str], *, from_start: bool = False,
                 max_bytes_per_poll: int = 4 << 20,
                 clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.problem: str | None = None
        self.parsed = 0
        self.unparsed = 0
        self.ignored = 0
        self._from_start = from_start
        self._first_poll = True
        self._max_bytes = max_bytes_per_poll
        self._clock = clock
        self._file: BinaryIO | None = None
        self._identity: tuple[int, int] | None = None
        self._offset = 0
        self._partial = b""

    def poll(self) -> list[JavaLogEvent]:
        """Events of the lines completed since the last poll."""
        events: list[JavaLogEvent] = []
        first, self._first_poll = self._first_poll, False
        if self._file is not None:
            st = self._stat()
            same = st is not None and (st.st_dev, st.st_ino) == self._identity
            if same and st is not None and st.st_size < self._offset:
                self._restart()  # copytruncate
            if self._read(events) or same:
                return events  # budget spent, or still the same file: nothing more to do
            self._finish_line(events)  # the path now names another file, or none
            self._close()
        if self._open(at_end=first and not self._from_start):
            self._read(events)
        return events

    def close(self) -> None:
        """Release the open file, if any."""
        self._close()

    def _stat(self) -> os.stat_result | None:
        try:
            return os.stat(self.path)
        except OSError as exc:
            self.problem = _describe(self.path, exc)
            return None

    def _open(self, *, at_end: bool) -> bool:
        try:  # non-blocking: a FIFO must not hang kmon waiting for a writer
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        except OSError as exc:
            self.problem = _describe(self.path, exc)
            return False
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            self.problem = f"{self.path}: not a regular file; kmon follows log files only"
            return False
        os.set_blocking(fd, True)
        handle = os.fdopen(fd, "rb")
        self._file, self._identity = handle, (st.st_dev, st.st_ino)
        self._offset = handle.seek(0, os.SEEK_END) if at_end else 0
        self._partial = b""
        self.problem = None
        return True

    def _restart(self) -> None:
        assert self._file is not None
        self._file.seek(0)
        self._offset = 0
        self._partial = b""  # the rest of that line went with the truncation

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
        self._file, self._identity, self._partial = None, None, b""

    def _read(self, events: list[JavaLogEvent]) -> bool:
        """Read what the open file has; True if the per-poll budget ran out."""
        assert self._file is not None
        try:
            data = self._file.read(self._max_bytes)
        except OSError as exc:
            self.problem = _describe(self.path, exc)
            self._close()
            return False
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        if len(self._partial) > _MAX_LINE:
            lines.append(self._partial)
            self._partial = b""
        read_ms = int(self._clock() * 1000)
        for line in lines:
            self._take(line, read_ms, events)
        return len(data) >= self._max_bytes

    def _finish_line(self, events: list[JavaLogEvent]) -> None:
        """A rotated-away file's last line has no newline and never will."""
        if self._partial:
            self._take(self._partial, int(self._clock() * 1000), events)
            self._partial = b""

    def _take(self, line: bytes, read_ms: int, events: list[JavaLogEvent]) -> None:
        text = decoded(line).rstrip("\r")
        event, recognised = _match(text)
        if event is not None:
            self.parsed += 1
            events.append(event if event.ts_ms is not None else replace(event, ts_ms=read_ms))
        elif recognised:
            self.unparsed += 1
        else:
            self.ignored += 1


def _describe(path: Path, exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"{path}: no such file (waiting for it)"
    return f"{path}: {exc.strerror or exc}"

"""The few Kafka protocol facts the wire source reads: request headers, and the brokers and
coordinator in Metadata and FindCoordinator responses; and kmon's own two requests, Metadata
and DescribeConfigs, with the parsers of their answers.

A request starts with int32 size, int16 api_key, int16 api_version, int32
correlation_id, then the client_id string (nullable int16 length); a response
with int32 size and int32 correlation_id (then, in flexible versions, tagged
fields). Message specs: apache/kafka clients/src/main/resources/common/message/.
Every parser takes a prefix of the message (what was captured) and returns None
where the prefix ends before the fact.
"""

from __future__ import annotations

import contextlib
import functools
import struct
from typing import NamedTuple

from kmon.sources.text import decoded

API_NAMES = {
    0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit",
    9: "OffsetFetch", 10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat",
    13: "LeaveGroup", 14: "SyncGroup", 15: "DescribeGroups", 16: "ListGroups",
    17: "SaslHandshake", 18: "ApiVersions", 19: "CreateTopics", 22: "InitProducerId",
    24: "AddPartitionsToTxn", 25: "AddOffsetsToTxn", 26: "EndTxn", 28: "TxnOffsetCommit",
    32: "DescribeConfigs", 36: "SaslAuthenticate", 60: "DescribeCluster",
    68: "ConsumerGroupHeartbeat",
}
BROKER_APIS = frozenset({0, 1, 2})  # Produce, Fetch, ListOffsets: to a partition's leader
GROUP_APIS = frozenset({8, 9, 11, 12, 13, 14, 68})  # to the group coordinator
TXN_APIS = frozenset({24, 25, 26})  # to the transaction coordinator
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
SASL_APIS = frozenset({SASL_HANDSHAKE, SASL_AUTHENTICATE})
MAX_API_KEY = 127
MAX_API_VERSION = 31
MAX_CLIENT_ID = 255
REQUEST_HEADER = 14  # size .. client_id length
METADATA, FIND_COORDINATOR, API_VERSIONS, DESCRIBE_CONFIGS = 3, 10, 18, 32
IDLE_LIMIT = "connections.max.idle.ms"  # the broker and client setting
BROKER_RESOURCE = 4  # DescribeConfigs' resource type of one broker's configuration
MAX_CONFIGS = 64  # config entries read of one answer (kmon asks for one)
# first flexible (compact, tagged) version of each response kmon parses (SaslHandshake: none)
FLEXIBLE_FROM = {METADATA: 9, FIND_COORDINATOR: 3, SASL_HANDSHAKE: MAX_API_VERSION + 1,
                 SASL_AUTHENTICATE: 2}


def api_name(key: int) -> str:
    return API_NAMES.get(key, f"api{key}")


class RequestHeader(NamedTuple):
    """The header of one request."""

    size: int  # bytes after the size field
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


_REQUEST_HEADER = struct.Struct(">ihhih")


def request_header(data: bytes, prefix: bool = False) -> RequestHeader | None:
    """The request header at the start of ``data``, if it is there and plausible; with
    ``prefix`` (a few bytes read over TLS), a client_id cut short is left unnamed."""
    if len(data) < REQUEST_HEADER:
        return None
    size, key, version, correlation, length = _REQUEST_HEADER.unpack_from(data)
    if not (10 <= size < 1 << 30 and 0 <= key <= MAX_API_KEY
            and 0 <= version <= MAX_API_VERSION and -1 <= length <= MAX_CLIENT_ID):
        return None
    client_id = None
    if length >= 0:
        raw = data[REQUEST_HEADER:REQUEST_HEADER + length]
        if len(raw) < length and prefix:
            return RequestHeader(size, key, version, correlation, None)
        client_id = _client_id(raw) if len(raw) == length else None
        if client_id is None:
            return None
    return RequestHeader(size, key, version, correlation, client_id)


@functools.lru_cache(maxsize=256)
def _client_id(raw: bytes) -> str | None:
    """The client_id ``raw`` spells, if it is printable ASCII (a process sends the same few)."""
    return raw.decode() if raw.isascii() and raw.decode().isprintable() else None


class _Reader:
    """Reads Kafka's primitive types from a captured prefix; ``None`` past its end."""

    def __init__(self, data: bytes, offset: int, flexible: bool) -> None:
        self.data, self.at, self.flexible = data, offset, flexible

    def _take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise EOFError
        chunk = self.data[self.at:self.at + n]
        self.at += n
        return chunk

    def int8(self) -> int:
        return int.from_bytes(self._take(1), "big", signed=True)

    def int16(self) -> int:
        return int.from_bytes(self._take(2), "big", signed=True)

    def int32(self) -> int:
        return int.from_bytes(self._take(4), "big", signed=True)

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise EOFError

    def string(self) -> str | None:
        length = self.uvarint() - 1 if self.flexible else self.int16()
        return None if length < 0 else decoded(self._take(length))

    def array_length(self) -> int:
        return self.uvarint() - 1 if self.flexible else self.int32()

    def tags(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self._take(self.uvarint())


def response_correlation(data: bytes) -> int | None:
    """The correlation id of the response at the start of ``data``."""
    if len(data) < 8:
        return None
    return int.from_bytes(data[4:8], "big", signed=True)


def error_code(data: bytes, api: int, version: int) -> int | None:
    """The error code that opens the body of a response (SaslHandshake, SaslAuthenticate)."""
    read = _Reader(data, 8, version >= FLEXIBLE_FROM[api])
    try:
        read.tags()
        return read.int16()
    except EOFError:
        return None


class MetadataAnswer(dict):
    """broker id -> (host, port), as a Metadata response lists them, and the cluster id it
    carries (versions 2 and later; None before, or when the broker sends none)."""

    cluster_id: str | None = None


def metadata_brokers(data: bytes, version: int) -> MetadataAnswer | None:
    """The brokers (and cluster id) of a Metadata response (``data`` from its size field)."""
    flexible = version >= FLEXIBLE_FROM[METADATA]
    read = _Reader(data, 8, flexible)
    try:
        read.tags()  # the response header's tagged fields (flexible versions)
        if version >= 3:
            read.int32()  # throttle_time_ms
        brokers = MetadataAnswer()
        for _ in range(read.array_length()):
            node_id, host, port = read.int32(), read.string(), read.int32()
            if version >= 1:
                read.string()  # rack
            read.tags()
            if host:
                brokers[node_id] = (host, port)
    except (EOFError, UnicodeDecodeError):
        return None
    if version >= 2:  # a captured prefix may end before it: the brokers stand without it
        with contextlib.suppress(EOFError):
            brokers.cluster_id = read.string() or None
    return brokers


def coordinator_answer(data: bytes, version: int) -> tuple[int, str, int] | None:
    """(broker id, host, port) of the coordinator a FindCoordinator response names."""
    flexible = version >= FLEXIBLE_FROM[FIND_COORDINATOR]
    read = _Reader(data, 8, flexible)
    try:
        read.tags()
        if version >= 1:
            read.int32()  # throttle_time_ms
        if version >= 4:  # batched: the first key's answer
            if read.array_length() < 1:
                return None
            read.string()  # key
            node_id, host, port, error = read.int32(), read.string(), read.int32(), read.int16()
        else:
            error = read.int16()
            if version >= 1:
                read.string()  # error_message
            node_id, host, port = read.int32(), read.string(), read.int32()
        return (node_id, host, port) if error == 0 and host and node_id >= 0 else None
    except (EOFError, UnicodeDecodeError):
        return None


def metadata_request(correlation_id: int, client_id: str = "kmon", version: int = 1) -> bytes:
    """A Metadata request (v1 or v2: the same body) for no topics: the answer lists the
    brokers only (and from v2 the cluster id)."""
    return _request(METADATA, version, correlation_id, client_id, (0).to_bytes(4, "big"))


def describe_configs_request(correlation_id: int, broker_id: int, names: list[str],
                             client_id: str = "kmon") -> bytes:
    """A DescribeConfigs request (v1, what every broker since Kafka 1.1 and 4.x answers) for
    the configuration entries ``names`` of broker ``broker_id``, without their synonyms."""
    body = ((1).to_bytes(4, "big") + BROKER_RESOURCE.to_bytes(1, "big")
            + _string(str(broker_id)) + len(names).to_bytes(4, "big")
            + b"".join(_string(name) for name in names) + b"\0")
    return _request(DESCRIBE_CONFIGS, 1, correlation_id, client_id, body)


def config_values(data: bytes) -> dict[str, str | None] | None:
    """name -> value of the configuration a DescribeConfigs v1 response gives for its first
    resource (its first ``MAX_CONFIGS`` entries); None if it carries an error or is cut."""
    read = _Reader(data, 8, False)
    try:
        read.int32()  # throttle_time_ms
        if read.array_length() < 1:
            return None
        error = read.int16()
        read.string()  # error_message
        read.int8(), read.string()  # resource type and name
        if error:
            return None
        values: dict[str, str | None] = {}
        for _ in range(min(read.array_length(), MAX_CONFIGS)):
            name, value = read.string(), read.string()
            read.int8(), read.int8(), read.int8()  # read_only, config_source, is_sensitive
            for _ in range(read.array_length()):  # synonyms (none asked for)
                read.string(), read.string(), read.int8()
            if name is not None:
                values[name] = value
        return values
    except (EOFError, UnicodeDecodeError):
        return None


def _request(api: int, version: int, correlation_id: int, client_id: str, body: bytes) -> bytes:
    """A whole non-flexible request: size, header (v1: with ``client_id``), ``body``."""
    message = (api.to_bytes(2, "big") + version.to_bytes(2, "big")
               + correlation_id.to_bytes(4, "big") + _string(client_id) + body)
    return len(message).to_bytes(4, "big") + message


def _string(text: str) -> bytes:
    raw = text.encode()
    return len(raw).to_bytes(2, "big") + raw

"""The dashboard's row filter: ``role:coordinator state:CLOSE_WAIT broker:1 client:app``.

Terms on one field are alternatives, terms on different fields must all hold. A field's
value matches exactly: ``broker:2`` is broker 2 (or the broker at the address ``broker:HOST:PORT``
names), never an address with a 2 in it; ``client:`` matches a whole client id or client
instance name. A bare word matches anywhere in the remote address, broker name or client.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from kmon.model import Connection
from kmon.tcp_state import TcpState

FIELDS = ("role", "state", "broker", "node", "client", "pid")


class FilterError(ValueError):
    """A filter the user typed that kmon cannot read."""


def _client_text(conn: Connection, client_ids: dict[str, str]) -> str:
    return f"{conn.client or ''} {client_ids.get(conn.client or '', '')}".lower()


@dataclass(frozen=True)
class RowFilter:
    """A parsed filter; the empty filter matches every row."""

    text: str = ""
    terms: dict[str, tuple[str, ...]] = field(default_factory=dict)
    words: tuple[str, ...] = ()

    def matches(self, conn: Connection, pid: int,
                client_ids: dict[str, str] | None = None) -> bool:
        """True when ``conn`` (of process ``pid``) passes every term."""
        if not self.terms and not self.words:
            return True
        ids = client_ids or {}
        for name, wanted in self.terms.items():
            if not any(_field_matches(name, value, conn, pid, ids) for value in wanted):
                return False
        haystack = " ".join((conn.remote or "", conn.broker_name or "",
                             _client_text(conn, ids))).lower()
        return all(word in haystack for word in self.words)


def _field_matches(name: str, value: str, conn: Connection, pid: int,
                   client_ids: dict[str, str]) -> bool:
    if name == "role":
        return conn.role.value.startswith(value)
    if name == "state":
        return conn.state.lower().replace("-", "_").startswith(value.replace("-", "_"))
    if name == "broker":
        return value in (str(conn.broker_id), (conn.remote or "").lower())
    if name == "node":
        return str(conn.node_id) == value
    if name == "pid":
        return str(pid) == value
    return value in {(conn.client or "").lower(),  # client: a whole instance name or id
                     client_ids.get(conn.client or "", "").lower()}


def parse_filter(text: str) -> RowFilter:
    """Read a filter typed by the user; FilterError names what is wrong."""
    terms: dict[str, list[str]] = defaultdict(list)
    words: list[str] = []
    for token in text.split():
        name, sep, value = token.partition(":")
        if not sep:
            words.append(token.lower())
            continue
        name = name.lower()
        if name not in FIELDS:
            raise FilterError(f"unknown filter field {name!r}; use {', '.join(FIELDS)}")
        if not value:
            raise FilterError(f"{name}: needs a value, e.g. {name}:{_EXAMPLES[name]}")
        terms[name].append(value.lower())
    return RowFilter(text.strip(), {k: tuple(v) for k, v in terms.items()}, tuple(words))


_EXAMPLES = {"role": "coordinator", "state": TcpState.CLOSE_WAIT.value, "broker": "1", "node": "-1",
             "client": "orders-reader-a", "pid": "1234"}

"""One vocabulary of column names: each column's JSON key is its name in tsv, and its text
header is that key in words (``idle_limit_ms`` -> ``idle limit``), for every output.

``kind`` says how text shows a value: ``text``, ``count``, ``ms`` (a duration),
``node`` (a node id), ``fraction``, ``findings`` (a list of findings, read as their
reasons). ``wide`` columns are left out of a table that
must fit the terminal and shown by ``-o wide``, tsv and JSON; numbers and ``whole``
columns are never narrowed to fit.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    """One column: its JSON key, how its values read, and whether only wide output has it."""

    key: str
    kind: str = "text"
    wide: bool = False
    whole: bool = False  # never narrowed to fit (short words: a role, a TCP state)

    @property
    def header(self) -> str:
        """The key in words: units and underscores dropped."""
        words = self.key.removesuffix("_ms").removesuffix("_id").replace("_", " ")
        return HEADER_OVERRIDES.get(self.key, words)

    @property
    def numeric(self) -> bool:
        """Right-aligned in text."""
        return self.kind not in ("text", "findings")


# where the key in words would not read well
HEADER_OVERRIDES = {"node_id": "node", "broker_id": "broker", "client_ids": "client ids",
                    "max_idle_ms": "max idle", "close_wait": "CLOSE_WAIT",
                    "idle_limit_ms": "limit", "requests_sent": "requests",
                    "confidence": "conf"}

# one row per connection: kmon attach (its JSON keys are kmon.model.Connection.to_dict's)
CONNECTION_COLUMNS = (
    Column("pid", "count"), Column("role", whole=True), Column("node_id", "node"),
    Column("broker_id", "node"), Column("client"), Column("local", wide=True),
    Column("remote"), Column("state", whole=True), Column("idle_ms", "ms"),
    Column("idle_limit_ms", "ms"), Column("reap_in_ms", "ms"),
    Column("idle_limit_by", wide=True), Column("bytes_sent", "count", wide=True),
    Column("bytes_received", "count", wide=True), Column("requests_sent", "count"),
    Column("in_flight", "count", wide=True), Column("rtt_ms", "ms", wide=True),
    Column("tcp_rtt_ms", "ms", wide=True), Column("broker_name", wide=True),
    Column("confidence", "fraction"),
)

# one row per client process: kmon ps (and the host view's rows)
PROCESS_COLUMNS = (
    Column("cluster"), Column("pid", "count"), Column("user"), Column("command"),
    Column("client_ids"), Column("bootstrap", "count"), Column("coordinator", "count"),
    Column("broker", "count"), Column("unknown", "count"),
    Column("close_wait", "count"), Column("max_idle_ms", "ms"),
    Column("clients_created", "count", wide=True), Column("churn"),
    Column("findings", "findings"), Column("cmdline", wide=True),
)

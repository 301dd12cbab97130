"""Segments dropped on loopback with nftables, for the tests of silent drops: a table of
kmon's tests per rule, deleted when the test ends."""

from __future__ import annotations

import itertools
import os
import subprocess

__all__ = ["Drops"]

_tables = itertools.count()


class Drops:
    """``drop(port, from_port=None)``: nftables drops every TCP segment sent to ``port`` on
    loopback (from ``from_port`` alone, if given: one connection, the others to the port
    untouched), in the input hook: the sender's kernel counts them sent, and retransmits
    them. ``close()`` deletes every table made, whatever happened."""

    def __init__(self) -> None:
        self.tables: list[str] = []

    def drop(self, port: int, from_port: int | None = None) -> None:
        table = f"kmon_test_{os.getpid()}_{next(_tables)}"
        source = f"tcp sport {from_port} " if from_port is not None else ""
        rules = (f"table inet {table} {{\n chain input {{\n type filter hook input priority 0;"
                 f" policy accept;\n iifname \"lo\" {source}tcp dport {port} drop\n }}\n}}\n")
        self.tables.append(table)
        subprocess.run(["nft", "-f", "-"], input=rules, text=True, check=True)

    def close(self) -> None:
        for table in self.tables:
            subprocess.run(["nft", "delete", "table", "inet", table], capture_output=True)
        self.tables = []

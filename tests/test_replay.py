"""A replayed snapshot is the snapshot that was written, its rows in the engine's order."""

from __future__ import annotations

from kmon.engine.playback import snapshot_from_dict
from kmon.model import Connection, ProcessView, Role, Snapshot


def test_replayed_rows_come_back_in_display_order_whatever_order_the_file_has():
    rows = [Connection(key=f"sock:{n}", role=role, node_id=node, broker_id=None, client=None,
                       local="127.0.0.1:50000", remote="127.0.0.1:9092", state="ESTABLISHED")
            for n, (role, node) in enumerate([(Role.UNKNOWN, None), (Role.BROKER, 2),
                                              (Role.BOOTSTRAP, -1), (Role.BROKER, 1)])]
    written = Snapshot(1_000, "h", [ProcessView(7, "p", "", connections=rows)]).to_dict()
    replayed = snapshot_from_dict(written).processes[0].connections
    assert replayed == sorted(rows, key=Connection.display_order)
    assert [(c.role, c.node_id) for c in replayed][:2] == [(Role.BOOTSTRAP, -1), (Role.BROKER, 1)]

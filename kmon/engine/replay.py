"""Snapshots recorded as JSON lines (``kmon attach PID --json``), played back.

The dashboard can show a recording exactly as it showed the live process,
which makes its screens reproducible (screenshots, snapshot tests).
"""

from __future__ import annotations

import json
from pathlib import Path

from kmon.errors import UserError
from kmon.files import UnsafeFile, read_bounded
from kmon.model import (
    Churn,
    ClientInstance,
    CloseStory,
    Connection,
    Event,
    EventKind,
    ProcessView,
    Role,
    Snapshot,
)

MAX_RECORDING_BYTES = 512 * 1024 * 1024  # an attach --json recording of hours at 2,000 rows
_CONNECTION_FIELDS = set(Connection.__dataclass_fields__)
_CLIENT_FIELDS = set(ClientInstance.__dataclass_fields__)


class ReplayError(UserError):
    """A recording kmon cannot read."""


def snapshot_from_dict(record: dict) -> Snapshot:
    """The Snapshot that ``Snapshot.to_dict()`` wrote."""
    processes = []
    for p in record["processes"]:
        clients = [ClientInstance(**{k: v for k, v in c.items() if k in _CLIENT_FIELDS})
                   for c in p["clients"]]
        connections = [Connection(**{**{k: v for k, v in c.items() if k in _CONNECTION_FIELDS},
                                     "role": Role(c["role"])})
                       for c in p["connections"]]
        connections.sort(key=Connection.display_order)  # as the engine orders them
        processes.append(ProcessView(p["pid"], p["name"], p["cmdline"], clients, connections,
                                     list(p.get("notices", [])), p.get("clients_created")))
    return Snapshot(record["ts_ms"], record["host"], processes)


def event_from_dict(record: dict) -> Event:
    """The Event that ``Event.to_dict()`` wrote."""
    close = (CloseStory(**{k: record.get(k) for k in CloseStory.__dataclass_fields__})
             if record.get("closed_by") else None)
    churn = (Churn(**{k: record[k] for k in Churn.__dataclass_fields__})
             if record.get("pattern") else None)
    return Event(record["ts_ms"], EventKind(record["kind"]), record["pid"], record["key"],
                 Role(record["role"]) if record.get("role") else None, record.get("node_id"),
                 record.get("remote"), record.get("detail", ""), record.get("client"),
                 record.get("broker_id"), close=close, churn=churn)


def read_recording(path: Path) -> list[tuple[Snapshot, list[Event]]]:
    """Every (snapshot, events) of a JSON-lines recording; ReplayError names a bad line."""
    try:
        data = read_bounded(path, MAX_RECORDING_BYTES, "recording")
    except OSError as err:
        raise ReplayError(str(err) if isinstance(err, UnsafeFile)
                          else f"cannot read {path}: {err.strerror}") from err
    frames = []
    for number, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw.decode("utf-8"))
            frames.append((snapshot_from_dict(record),
                           [event_from_dict(e) for e in record.get("events", [])]))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as err:
            raise ReplayError(f"{path}:{number} is not a kmon snapshot "
                              f"({type(err).__name__}: {str(err)[:200]})") from err
    if not frames:
        raise ReplayError(f"{path} holds no snapshots")
    return frames


def recorded_interval_s(frames: list[tuple[Snapshot, list[Event]]]) -> float:
    """The median time between the recorded snapshots (1 s for a single one)."""
    gaps = sorted(b[0].ts_ms - a[0].ts_ms for a, b in zip(frames, frames[1:], strict=False))
    gaps = [g for g in gaps if g > 0]
    return gaps[len(gaps) // 2] / 1000 if gaps else 1.0


class Replay:
    """A snapshot source that plays a recording, then holds its last snapshot."""

    def __init__(self, frames: list[tuple[Snapshot, list[Event]]]) -> None:
        self.frames = frames
        self.position = 0

    @property
    def finished(self) -> bool:
        return self.position >= len(self.frames)

    def poll(self) -> tuple[Snapshot, list[Event]]:
        """The next recorded snapshot and its events (the last one again, without events)."""
        if self.finished:
            return self.frames[-1][0], []
        frame = self.frames[self.position]
        self.position += 1
        return frame

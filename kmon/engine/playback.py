"""Snapshots recorded as JSON lines (``kmon attach PID --json``), played back.

The dashboard can show a recording exactly as it showed the live process,
which makes its screens reproducible (screenshots, snapshot tests). A recording
is checked when it is opened, every line and every field's type
(``recording_schema``), one line in memory at a time; its frames are read again
from the open file as they are played, so a replay holds one frame, not the file.
"""

from __future__ import annotations

import json
from array import array
from pathlib import Path
from typing import Any

from kmon.engine.recording_schema import SNAPSHOT, SchemaError, check, check_event
from kmon.errors import UserError
from kmon.model import (
    Churn,
    ClientInstance,
    CloseStory,
    Connection,
    Event,
    EventKind,
    Finding,
    ProcessView,
    Role,
    Snapshot,
)

MAX_RECORDING_BYTES = 512 * 1024 * 1024  # an attach --json recording of hours at 2,000 rows
MAX_LINE_BYTES = 64 * 1024 * 1024  # one snapshot: 2,000 rows take about 1 MiB
_CONNECTION_FIELDS = set(Connection.__dataclass_fields__)
_CLIENT_FIELDS = set(ClientInstance.__dataclass_fields__)
_FINDING_FIELDS = set(Finding.__dataclass_fields__)


class ReplayError(UserError):
    """A recording kmon cannot read."""


def snapshot_from_dict(record: dict[str, Any]) -> Snapshot:
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
                                     list(p.get("notices", [])), p.get("clients_created"),
                                     p.get("opened_1m"), p.get("closed_1m"),
                                     findings=[Finding(**{k: v for k, v in f.items()
                                                          if k in _FINDING_FIELDS})
                                               for f in p.get("findings", [])]))
    return Snapshot(record["ts_ms"], record["host"], processes, record.get("host_closed_1m"))


def event_from_dict(record: dict[str, Any]) -> Event:
    """The Event that ``Event.to_dict()`` wrote."""
    story: dict[str, Any] = {k: record.get(k) for k in CloseStory.__dataclass_fields__}
    close = CloseStory(**story) if record.get("closed_by") else None
    churn = (Churn(**{k: record[k] for k in Churn.__dataclass_fields__})
             if record.get("pattern") else None)
    return Event(record["ts_ms"], EventKind(record["kind"]), record["pid"], record["key"],
                 Role(record["role"]) if record.get("role") else None, record.get("node_id"),
                 record.get("remote"), record.get("detail", ""), record.get("client"),
                 record.get("broker_id"), close=close, churn=churn)


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is no JSON number")


def frame_from_line(raw: bytes) -> tuple[Snapshot, list[Event]]:
    """One line's snapshot and events, every field's type checked first."""
    record = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    check(record, SNAPSHOT, "snapshot")
    events = record.get("events", [])
    if not isinstance(events, list):
        raise SchemaError("snapshot.events is not a list")
    for index, event in enumerate(events):
        check_event(event, f"events[{index}]")
    return snapshot_from_dict(record), [event_from_dict(e) for e in events]


class Recording:
    """A recording file, checked line by line when opened: where each frame is, its time,
    and the processes it shows. ``frame(i)`` reads frame ``i`` again from the open file."""

    def __init__(self, path: Path) -> None:
        from kmon.sources.recording_file import RecordingFile, RecordingFileError

        self.path = path
        try:
            self.file = RecordingFile(path, MAX_RECORDING_BYTES, MAX_LINE_BYTES)
            self.offsets, self.numbers, self.times = array("q"), array("q"), array("q")
            self.pids: dict[int, None] = {}  # every recorded process, in the order first seen
            for number, offset, raw in self.file.lines():
                if raw.strip():
                    snapshot, _ = self._parse(number, raw)
                    self.offsets.append(offset)
                    self.numbers.append(number)
                    self.times.append(snapshot.ts_ms)
                    self.pids.update(dict.fromkeys(p.pid for p in snapshot.processes))
        except RecordingFileError as err:
            raise ReplayError(str(err)) from err
        if not self.offsets:
            raise ReplayError(f"{path} holds no snapshots")

    def __len__(self) -> int:
        return len(self.offsets)

    def frame(self, index: int) -> tuple[Snapshot, list[Event]]:
        """Frame ``index``: its snapshot and events (ReplayError if the file changed)."""
        start = self.offsets[index]
        end = self.offsets[index + 1] if index + 1 < len(self.offsets) else self.file.size
        return self._parse(self.numbers[index], self.file.read(start, end - start))

    def _parse(self, number: int, raw: bytes) -> tuple[Snapshot, list[Event]]:
        try:
            return frame_from_line(raw)
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as err:
            why = str(err) if isinstance(err, SchemaError) else f"{type(err).__name__}: {err}"
            raise ReplayError(f"{self.path}:{number} is not a kmon snapshot "
                              f"({why[:200]})") from err


def read_recording(path: Path) -> Recording:
    """The recording at ``path``, checked; ReplayError names a bad line and field."""
    return Recording(path)


def recorded_interval_s(recording: Recording) -> float:
    """The median time between the recorded snapshots (1 s for a single one)."""
    times = recording.times
    gaps = sorted(b - a for a, b in zip(times, times[1:], strict=False))
    gaps = [g for g in gaps if g > 0]
    return gaps[len(gaps) // 2] / 1000 if gaps else 1.0


class Replay:
    """A snapshot source that plays a recording, then holds its last snapshot."""

    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self.position = 0
        self.last: Snapshot | None = None

    @property
    def finished(self) -> bool:
        return self.position >= len(self.recording)

    def poll(self) -> tuple[Snapshot, list[Event]]:
        """The next recorded snapshot and its events (the last one again, without events)."""
        if self.finished and self.last is not None:  # a recording holds one frame at least
            return self.last, []
        snapshot, events = self.recording.frame(self.position)
        self.position += 1
        self.last = snapshot
        return snapshot, events

"""A recording session: snapshots, events and connection lives into the Parquet tables.

Rows are buffered and written as complete part files at least every
``flush_every_s`` seconds, so a killed recorder loses at most that window.
The session row is written with the first flush (``stopped_ms`` null) and
again by ``close()`` (``stopped_ms`` set), which then compacts the session's
parts into one file per partition. The root directory is opened and verified
(``kmon.files.OutputDir``) when the recorder is made: a place kmon must not
write into is refused before anything is recorded.
"""

from __future__ import annotations

import getpass
import os
import secrets
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from kmon import __version__
from kmon.files import OutputDir
from kmon.model import Event, Snapshot
from kmon.record.schema import (
    SCHEMAS,
    clients_json,
    event_rows,
    finding_rows,
    life_rows,
    partition_date,
    session_row,
    snapshot_rows,
)
from kmon.record.writer import PartWriter

COMPACT_BATCH_ROWS = 100_000  # rows per row group of a compacted file, at most


def new_session_id(host: str) -> str:
    """A sortable, unique session id: ``<UTC yyyymmddTHHMMSSZ>-<host>-<pid>-<4 hex>``."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{host}-{os.getpid()}-{secrets.token_hex(2)}"


def current_user() -> str:
    """The recording user's name (its uid when it has no name)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


@dataclass(frozen=True)
class Summary:
    """What a session left on disk."""

    rows: dict[str, int]  # table -> rows written
    files: list[Path]
    bytes: int


class Recorder:
    """Writes one session's snapshots, events and session row under ``root``.

    Raises UnsafeFile (an OSError) when ``root`` cannot be made or is not a place kmon
    may write into (see ``kmon.files.OutputDir``). Buffered rows are flushed at least
    every ``flush_every_s`` by a timer thread of the recorder's own, so a poll that
    blocks (a stopped JVM, a slow kernel) cannot stretch what a kill would lose.
    """

    def __init__(self, root: Path, host: str, session_id: str, interval_ms: int,
                 flush_every_s: float = 10.0) -> None:
        self.root, self.session_id, self.interval_ms = Path(root), session_id, interval_ms
        self.flush_every_s = flush_every_s
        self.out = OutputDir.open(self.root)
        self.writers = {table: PartWriter(self.out, table, host, session_id)
                        for table in SCHEMAS}
        self.rows: dict[str, int] = dict.fromkeys(SCHEMAS, 0)
        self.parts: dict[str, list[Path]] = {table: [] for table in SCHEMAS}
        self.user = current_user()
        self.started_ms = int(time.time() * 1000)
        self.clients: dict[tuple[int, str], dict] = {}  # (pid, client name) -> client
        self.started_row_written = False
        self.next_flush = 0.0  # monotonic; the first add() flushes at once
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._timer = threading.Thread(target=self._flush_on_time, name="kmon-recorder-flush",
                                       daemon=True)
        self._timer.start()
        self.flush_error: OSError | None = None  # a timed flush that failed, raised by add()

    def add(self, snapshot: Snapshot, events: list[Event]) -> None:
        """Buffer one poll's rows; flush when the last flush is ``flush_every_s`` old."""
        if self.flush_error is not None:
            raise self.flush_error
        with self._lock:
            self.writers["snapshots"].add(snapshot_rows(snapshot, self.session_id))
            self.writers["events"].add(event_rows(events, self.session_id))
            self.writers["lives"].add(life_rows(snapshot, self.session_id))
            self.writers["findings"].add(finding_rows(snapshot, self.session_id))
            for client in clients_json(snapshot):
                self.clients.setdefault((client["pid"], client["name"]), client)
            if time.monotonic() >= self.next_flush:
                self._flush()

    def flush(self) -> None:
        """Write every buffered row as complete part files (the session row first time)."""
        with self._lock:
            self._flush()

    def _flush_on_time(self) -> None:
        while not self._closed.wait(min(1.0, self.flush_every_s)):
            if time.monotonic() < self.next_flush:
                continue
            try:
                self.flush()
            except OSError as err:  # the poll loop hears of it at its next add()
                self.flush_error = err
                return

    def _flush(self) -> None:
        if not self.started_row_written:
            self._add_session_row(stopped_ms=None)
            self.started_row_written = True
        for table, writer in self.writers.items():
            rows = len(writer.rows)
            self.parts[table] += writer.flush()
            self.rows[table] += rows
        self.next_flush = time.monotonic() + self.flush_every_s

    def close(self) -> Summary:
        """Flush, write the final session row, compact the parts; what is on disk now."""
        self._closed.set()
        self._timer.join()
        self._add_session_row(stopped_ms=int(time.time() * 1000))
        self.flush()
        try:
            sized = [compacted for table in SCHEMAS for compacted in self._compact(table)]
        finally:
            for writer in self.writers.values():
                writer.close()
            self.out.close()
        return Summary(rows=dict(self.rows), files=[path for path, _ in sized],
                       bytes=sum(size for _, size in sized))

    def _add_session_row(self, stopped_ms: int | None) -> None:
        self.writers["sessions"].add([session_row(
            self.session_id, self.user, __version__, self.started_ms, stopped_ms,
            self.interval_ms, list(self.clients.values()))])

    def _compact(self, table: str) -> list[tuple[Path, int]]:
        """``<session>.parquet`` and its size, one per partition directory, in place of the
        session's parts.

        A compacted file is written atomically before its parts are deleted: a
        kill in between leaves rows twice, never a gap or a broken file.
        """
        writer = self.writers[table]
        by_dir: dict[Path, list[str]] = defaultdict(list)
        for part in self.parts[table]:
            by_dir[part.parent].append(part.name)
        if not by_dir:  # a table without rows still gets a file: its schema, no rows
            by_dir[writer.partition_dir(partition_date(self.started_ms)).path] = []
        files = []
        target = f"{self.session_id}.parquet"
        for path, parts in sorted(by_dir.items()):
            directory = writer.dirs[path]
            if len(parts) == 1:
                directory.rename(parts[0], target)
            else:  # several parts, or none
                _concatenate(directory, parts, target, SCHEMAS[table])
                for name in parts:
                    directory.remove(name)
                directory.sync()
            files.append((path / target, directory.size(target)))
        self.parts[table] = [path for path, _ in files]
        return files


def _concatenate(directory: OutputDir, parts: list[str], target: str,
                 schema: pa.Schema) -> None:
    """Write the rows of ``parts`` (maybe none), in order, to ``target`` atomically."""
    with directory.replace(target) as file, \
            pq.ParquetWriter(file, schema, compression="zstd") as out:
        batch: list[pa.Table] = []
        for part in parts:
            with directory.open_read(part) as source:
                batch.append(pq.ParquetFile(source).read())
            if sum(t.num_rows for t in batch) >= COMPACT_BATCH_ROWS:
                out.write_table(pa.concat_tables(batch))
                batch = []
        if batch:
            out.write_table(pa.concat_tables(batch))

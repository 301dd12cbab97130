"""Complete Parquet part files, written atomically into the partitioned layout.

Each ``flush()`` writes whole files (footer included) under
``ROOT/<table>/date=YYYY-MM-DD/host=NAME/<session>-<seq>.parquet``: a file is
first written as a hidden ``.<name>.tmp`` and then renamed, so a killed
writer leaves either a complete part or a hidden leftover that readers
(Spark included) ignore. The file is synced before the rename and the
directory after it, so a power cut cannot leave a named but empty part.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kmon.record.schema import SCHEMAS


def durable_replace(source: Path, target: Path) -> None:
    """Rename ``source`` to ``target`` once its bytes are on disk, then sync the directory."""
    with open(source, "rb") as written:
        os.fsync(written.fileno())
    os.replace(source, target)
    sync_dir(target.parent)


def sync_dir(directory: Path) -> None:
    """Make the names in ``directory`` durable (renames, removals)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class PartWriter:
    """Buffers the rows of one table of one session; ``flush()`` writes them out."""

    def __init__(self, root: Path, table: str, host: str, session_id: str) -> None:
        self.root, self.table, self.host, self.session_id = Path(root), table, host, session_id
        self.schema = SCHEMAS[table]
        self.rows: list[dict] = []
        self.tables: list[pa.Table] = []
        self.sequence = 0

    def add(self, rows: list[dict]) -> None:
        """Buffer rows given as dicts (the recorder's way)."""
        self.rows.extend(rows)

    def add_table(self, table: pa.Table) -> None:
        """Buffer rows already built as an Arrow table of this writer's schema."""
        self.tables.append(table.select(self.schema.names).cast(self.schema))

    def partition_dir(self, date: str) -> Path:
        return self.root / self.table / f"date={date}" / f"host={self.host}"

    def flush(self) -> list[Path]:
        """Write the buffered rows as one part file per date; returns the files written."""
        tables = self.tables + ([pa.Table.from_pylist(self.rows, schema=self.schema)]
                                if self.rows else [])
        self.rows, self.tables = [], []
        if not tables:
            return []
        table = pa.concat_tables(tables)
        time_column = "started_ms" if self.table == "sessions" else "ts_ms"
        days = pc.strftime(pc.cast(table[time_column], pa.timestamp("ms", tz="UTC")),
                           format="%Y-%m-%d")
        return [self._write(day, table.filter(pc.equal(days, day)))
                for day in sorted(pc.unique(days).to_pylist())]

    def _write(self, date: str, table: pa.Table) -> Path:
        directory = self.partition_dir(date)
        directory.mkdir(parents=True, exist_ok=True)
        self.sequence += 1
        name = f"{self.session_id}-{self.sequence:06d}.parquet"
        tmp = directory / f".{name}.tmp"
        try:
            pq.write_table(table, tmp, compression="zstd")
            durable_replace(tmp, directory / name)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        return directory / name

"""Complete Parquet part files, written atomically into the partitioned layout.

Each ``flush()`` writes whole files (footer included) under
``ROOT/<table>/date=YYYY-MM-DD/host=NAME/<session>-<seq>.parquet``: a file is
first written under a hidden, unpredictable ``.<name>.<random>.tmp`` and then
renamed, so a killed writer leaves either a complete part or a hidden leftover
that readers (Spark included) ignore. The file is synced before the rename and
the directory after it, so a power cut cannot leave a named but empty part.
Every directory is a verified ``kmon.files.OutputDir``: a link planted in the
recording redirects nothing.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kmon.files import OutputDir
from kmon.record.schema import SCHEMAS


class PartWriter:
    """Buffers the rows of one table of one session; ``flush()`` writes them out."""

    def __init__(self, root: OutputDir, table: str, host: str, session_id: str) -> None:
        self.root, self.table, self.host, self.session_id = root, table, host, session_id
        self.schema = SCHEMAS[table]
        self.rows: list[dict] = []
        self.tables: list[pa.Table] = []
        self.sequence = 0
        self.dirs: dict[Path, OutputDir] = {}  # partition directories opened, by path

    def add(self, rows: list[dict]) -> None:
        """Buffer rows given as dicts (the recorder's way)."""
        self.rows.extend(rows)

    def add_table(self, table: pa.Table) -> None:
        """Buffer rows already built as an Arrow table of this writer's schema."""
        self.tables.append(table.select(self.schema.names).cast(self.schema))

    def partition_dir(self, date: str) -> OutputDir:
        """The partition directory of ``date``, made and verified on first use."""
        path = self.root.path / self.table / f"date={date}" / f"host={self.host}"
        if path not in self.dirs:
            with self.root.subdir(self.table) as table_dir, \
                    table_dir.subdir(f"date={date}") as date_dir:
                self.dirs[path] = date_dir.subdir(f"host={self.host}")
        return self.dirs[path]

    def flush(self) -> list[Path]:
        """Write the buffered rows as one part file per date; returns the files written."""
        tables = self.tables + ([pa.Table.from_pylist(self.rows, schema=self.schema)]
                                if self.rows else [])
        self.rows, self.tables = [], []
        if not tables:
            return []
        table = pa.concat_tables(tables)
        time_column = {"sessions": "started_ms", "lives": "closed_ms"}.get(self.table, "ts_ms")
        days = pc.strftime(pc.cast(table[time_column], pa.timestamp("ms", tz="UTC")),
                           format="%Y-%m-%d")
        return [self._write(day, table.filter(pc.equal(days, day)))
                for day in sorted(pc.unique(days).to_pylist())]

    def _write(self, date: str, table: pa.Table) -> Path:
        directory = self.partition_dir(date)
        self.sequence += 1
        name = f"{self.session_id}-{self.sequence:06d}.parquet"
        with directory.replace(name) as file:
            pq.write_table(table, file, compression="zstd")
        return directory.path / name

    def close(self) -> None:
        """Release the partition directories."""
        for directory in self.dirs.values():
            directory.close()
        self.dirs.clear()

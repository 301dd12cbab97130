"""Complete Parquet part files, written atomically into the partitioned layout.

Each ``flush()`` writes whole files (footer included) under
``ROOT/<table>/date=YYYY-MM-DD/host=NAME/<session>-<seq>.parquet``: a file is
first written as a hidden ``.<name>.tmp`` and then renamed, so a killed
writer leaves either a complete part or a hidden leftover that readers
(Spark included) ignore.
"""

from __future__ import annotations

import contextlib
import os
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from kmon.record.schema import SCHEMAS, partition_date


class PartWriter:
    """Buffers the rows of one table of one session; ``flush()`` writes them out."""

    def __init__(self, root: Path, table: str, host: str, session_id: str) -> None:
        self.root, self.table, self.host, self.session_id = Path(root), table, host, session_id
        self.schema = SCHEMAS[table]
        self.rows: list[dict] = []
        self.sequence = 0
        self.bytes_written = 0

    def add(self, rows: list[dict]) -> None:
        self.rows.extend(rows)

    def partition_dir(self, date: str) -> Path:
        return self.root / self.table / f"date={date}" / f"host={self.host}"

    def flush(self) -> list[Path]:
        """Write the buffered rows as one part file per date; returns the files written."""
        by_date: dict[str, list[dict]] = defaultdict(list)
        for row in self.rows:
            by_date[partition_date(row.get("ts_ms") or row["started_ms"])].append(row)
        written = [self._write(date, rows) for date, rows in sorted(by_date.items())]
        self.rows = []
        return written

    def _write(self, date: str, rows: list[dict]) -> Path:
        directory = self.partition_dir(date)
        directory.mkdir(parents=True, exist_ok=True)
        self.sequence += 1
        name = f"{self.session_id}-{self.sequence:06d}.parquet"
        tmp = directory / f".{name}.tmp"
        try:
            pq.write_table(pa.Table.from_pylist(rows, schema=self.schema), tmp,
                           compression="zstd")
            os.replace(tmp, directory / name)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        self.bytes_written += (directory / name).stat().st_size
        return directory / name

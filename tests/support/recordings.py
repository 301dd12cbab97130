"""Recordings kmon wrote: their tables, as Spark would read them, and their files."""

from __future__ import annotations

from pathlib import Path

__all__ = ["read", "recorded_pids", "data_files"]


def read(root: Path, table: str) -> list[dict]:
    """Every row of one recorded table, as Spark would see it (hive partitions)."""
    import pyarrow.dataset as ds

    from kmon.record.schema import SCHEMAS

    dataset = ds.dataset(root / table, format="parquet", partitioning="hive")
    assert dataset.schema.names == SCHEMAS[table].names + ["date", "host"]
    return dataset.to_table().to_pylist()


def recorded_pids(root: Path) -> set[int]:
    """The processes the snapshots written so far under ``root`` show (none before the first
    part is written)."""
    if not any((root / "snapshots").rglob("*.parquet")):
        return set()
    return {row["pid"] for row in read(root, "snapshots")}


def data_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())

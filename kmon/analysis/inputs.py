"""Find a recording's Parquet files, check each one cheaply, and load the good ones in Spark.

A file is checked from its footer (pyarrow reads only the metadata, plus the
tiny ``schema_version`` column when its statistics are missing) before Spark
sees it: a truncated or corrupt file, a file of a schema version this kmon
does not read, a file whose columns differ from its version's, or one outside the
``<table>/date=YYYY-MM-DD/host=NAME/`` layout is skipped with the reason, so
it can neither fail the job nor skew its numbers. Version 1 files are read
with the columns version 2 added as nulls. Hidden files and
directories (``.`` or ``_``) are ignored, as Spark does. Spark is handed exactly
the checked files: a path Spark would read as a glob (``sim*.parquet`` naming a
skipped ``simBAD.parquet`` too) has its glob characters escaped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from kmon.errors import UserError
from kmon.record.schema import ADDED_IN_V2, ADDED_IN_V3, READABLE_VERSIONS, SCHEMAS, TABLES

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

PARTITIONS = ("date", "host")
_GLOB = re.compile(r"([\\*?\[\]{}])")  # what Hadoop's glob reads specially: escaped
_PARTITION = {"date": re.compile(r"^date=\d{4}-\d{2}-\d{2}$"), "host": re.compile(r"^host=.+$")}


@dataclass(frozen=True)
class Skipped:
    """A file left out of the analysis, and why."""

    path: Path
    reason: str


@dataclass
class Inputs:
    """The checked files of one recording."""

    root: Path
    files: dict[str, list[Path]] = field(default_factory=dict)
    skipped: list[Skipped] = field(default_factory=list)

    @property
    def size(self) -> int:
        """Bytes of all the checked files."""
        return sum(path.stat().st_size for files in self.files.values() for path in files)


@dataclass
class Frames:
    """The recording's tables as Spark DataFrames, with ``date`` and ``host`` columns."""

    snapshots: DataFrame
    events: DataFrame
    sessions: DataFrame
    lives: DataFrame  # schema 3: empty for an older recording
    findings: DataFrame  # schema 4: empty for an older recording


def _hidden(name: str) -> bool:
    return name.startswith((".", "_"))


def check_file(path: Path, table: str, relative: Path) -> str | None:
    """Why ``path`` (``relative`` to its table directory) can't be used; None if it can."""
    if path.suffix != ".parquet":
        return "not a .parquet file"
    parts = relative.parts
    if len(parts) != 3 or not (_PARTITION["date"].match(parts[0])
                               and _PARTITION["host"].match(parts[1])):
        return f"not in the {table}/date=YYYY-MM-DD/host=NAME/ layout"
    try:
        parquet = pq.ParquetFile(path)
        versions = _schema_versions(parquet)
    except (pa.ArrowException, OSError) as err:
        return f"not a readable Parquet file (truncated or corrupt: {err})"
    others = versions - set(READABLE_VERSIONS) if versions is not None else set()
    if others:
        found = ", ".join(str(v) for v in sorted(others, key=str))
        readable = " or ".join(str(v) for v in READABLE_VERSIONS)
        return f"schema_version {found}, expected {readable}"
    actual = parquet.schema_arrow
    version = min(versions) if versions else next(  # no rows to tell: as its columns are
        (v for v in sorted(READABLE_VERSIONS, reverse=True)
         if _column_mismatch(actual, expected_schema(table, v), v) is None),
        max(READABLE_VERSIONS))
    return _column_mismatch(parquet.schema_arrow, expected_schema(table, version), version)


def expected_schema(table: str, version: int) -> pa.Schema:
    """The columns a file of ``table`` written by schema ``version`` holds."""
    schema = SCHEMAS[table]
    added = ((*ADDED_IN_V2.get(table, ()), *ADDED_IN_V3.get(table, ())) if version == 1
             else ADDED_IN_V3.get(table, ()) if version == 2 else ())
    for name in added:
        schema = schema.remove(schema.get_field_index(name))
    return schema


def _schema_versions(parquet: pq.ParquetFile) -> set | None:
    """The ``schema_version`` values in a file's rows (None without that column)."""
    names = parquet.schema_arrow.names
    if "schema_version" not in names:
        return None
    column = names.index("schema_version")
    meta, versions = parquet.metadata, set()
    for group in range(meta.num_row_groups):
        stats = meta.row_group(group).column(column).statistics
        if meta.row_group(group).num_rows == 0:
            continue
        if stats is None or not stats.has_min_max or stats.null_count:
            return set(parquet.read(columns=["schema_version"]).column(0).unique().to_pylist())
        versions |= {stats.min, stats.max}
    return versions


def _column_mismatch(actual: pa.Schema, expected: pa.Schema, version: int) -> str | None:
    problems = []
    missing = [n for n in expected.names if n not in actual.names]
    extra = [n for n in actual.names if n not in expected.names]
    if missing:
        problems.append("missing " + ", ".join(missing))
    if extra:
        problems.append("unexpected " + ", ".join(extra))
    for f in expected:
        if f.name in actual.names and actual.field(f.name).type != f.type:
            problems.append(f"{f.name} is {actual.field(f.name).type}, expected {f.type}")
    return (f"columns differ from schema v{version}: " + "; ".join(problems) if problems
            else None)


_PART = re.compile(r"^(?P<session>.+)-\d{6}\.parquet$")


def _compacted_already(path: Path) -> str | None:
    """A part whose session's compacted file sits beside it (the recorder was stopped
    between writing that file and deleting its parts): its rows are in that file."""
    part = _PART.match(path.name)
    if part and (path.parent / f"{part['session']}.parquet").is_file():
        return f"a part of {part['session']}.parquet, which holds its rows already"
    return None


def discover(root: Path) -> Inputs:
    """Every Parquet file of the recording at ``root``, checked."""
    if not root.exists():
        raise UserError(f"{root}: no such directory")
    if not root.is_dir():
        raise UserError(f"{root} is not a directory (expected a kmon recording)")
    if not any((root / table).is_dir() for table in TABLES):
        raise UserError(f"{root} holds no kmon recording (no snapshots/, events/ or sessions/)")
    inputs = Inputs(root)
    for table in TABLES:
        inputs.files[table] = []
        for path in sorted((root / table).rglob("*")):
            relative = path.relative_to(root / table)
            if path.is_dir() or any(_hidden(part) for part in relative.parts):
                continue
            reason = check_file(path, table, relative) or _compacted_already(path)
            if reason:
                inputs.skipped.append(Skipped(path, reason))
            else:
                inputs.files[table].append(path)
    return inputs


def exact_uri(path: Path) -> str:
    """A URI Spark reads as the file ``path`` and nothing else: Hadoop globs every path it
    is given, so ``\\ * ? [ ] { }`` in it are escaped."""
    return "file://" + _GLOB.sub(r"\\\1", str(path.resolve()))


def spark_schema(table: str) -> StructType:
    """The Spark schema of ``table``: its columns, then ``date`` and ``host``."""
    from pyspark.sql.types import (
        DoubleType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    types = {pa.int32(): IntegerType(), pa.int64(): LongType(), pa.string(): StringType(),
             pa.float64(): DoubleType()}
    fields = [StructField(f.name, types[f.type]) for f in SCHEMAS[table]]
    return StructType(fields + [StructField(p, StringType()) for p in PARTITIONS])


def load(spark: SparkSession, inputs: Inputs) -> Frames:
    """The checked files as DataFrames (an empty one for a table without files)."""

    def frame(table: str) -> DataFrame:
        schema = spark_schema(table)
        files = inputs.files[table]
        if not files:
            return spark.createDataFrame([], schema)
        base = f"file://{(inputs.root / table).resolve()}"
        return (spark.read.schema(schema).option("basePath", base)
                .parquet(*(exact_uri(f) for f in files)))

    return Frames(**{table: frame(table) for table in TABLES})

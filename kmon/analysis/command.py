"""``kmon analyze PATH``: the fleet analyses over a kmon recording, on Spark.

The input files are found and checked first (bad ones are skipped with a
warning naming them); Spark starts only when there is something to analyse.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kmon.errors import UserError
from kmon.files import OutputDir, UnsafeFile
from kmon.units import duration_arg


def _setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key.strip(), value


def _whole(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    return int(text)


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``kmon analyze``."""
    parser.add_argument("path", type=Path, metavar="PATH",
                        help="a kmon recording: the directory holding snapshots/, events/, "
                             "sessions/")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="write NAME.csv and NAME.parquet per analysis, and charts, here")
    parser.add_argument("--master", metavar="URL",
                        help="Spark master (default: $SPARK_MASTER, spark-submit's, "
                             "else local[*])")
    parser.add_argument("--conf", type=_setting, action="append", default=[],
                        metavar="KEY=VALUE", help="a Spark setting, e.g. spark.driver.memory=4g")
    parser.add_argument("--bootstrap-outlived", type=duration_arg, default=60.0,
                        metavar="DURATION",
                        help="flag bootstrap connections open this long after the client "
                             "learned the cluster (default 1m)")
    parser.add_argument("--metadata-max-age", type=duration_arg, default=300.0,
                        metavar="DURATION",
                        help="metadata.max.age.ms of clients whose config doesn't say "
                             "(default 5m)")
    parser.add_argument("--idle-limit", type=duration_arg, default=540.0, metavar="DURATION",
                        help="idle limit of connections whose rows don't say (default 9m)")
    parser.add_argument("--tolerance", type=duration_arg, default=30.0, metavar="DURATION",
                        help="slack of the reap-cycle rule; above two poll intervals "
                             "(default 30s)")
    parser.add_argument("--top", type=_whole, default=10, metavar="N",
                        help="rows shown per table in the terminal, 0 for all (default 10)")
    parser.add_argument("--max-rows", type=_whole, default=10_000, metavar="N",
                        help="rows of each result brought from Spark, shown and written: the "
                             "top ones; 0 for all, as many as the driver's memory holds "
                             "(default 10000)")


def run(args: argparse.Namespace) -> int:
    """Check the inputs, run every analysis, show and write the results."""
    from kmon.analysis.inputs import discover
    from kmon.present.plain_text import one_line

    inputs = discover(args.path)
    for skipped in inputs.skipped:
        print(one_line(f"kmon: warning: skipped {skipped.path}: {skipped.reason}"),
              file=sys.stderr)
    if not inputs.files["snapshots"]:
        raise UserError(f"no readable snapshot files under {args.path}")
    if args.out is not None:  # refused now, not after the analyses ran
        _open_out(args.out).close()
    try:
        import matplotlib  # noqa: F401  (drawn with once Spark is done)

        from kmon.analysis import jobs, spark
        from kmon.analysis.inputs import load
    except ImportError as err:
        raise UserError(f"kmon analyze needs {err.name}: pip install 'kmon[analyze]'") from err

    params = jobs.Params(bootstrap_outlived_ms=round(args.bootstrap_outlived * 1000),
                         metadata_max_age_ms=round(args.metadata_max_age * 1000),
                         idle_limit_ms=round(args.idle_limit * 1000),
                         tolerance_ms=round(args.tolerance * 1000))
    with ThreadPoolExecutor(1) as pool:
        # matplotlib's import overlaps the JVM's start
        loading = pool.submit(importlib.import_module, "kmon.analysis.report")
        with spark.session(spark.resolve_master(args.master), dict(args.conf),
                           inputs.size) as session:
            tables = jobs.run_all(load(session, inputs), params, args.max_rows)
        report = loading.result()
    for name, table in tables.items():
        if jobs.total_rows(table) > table.num_rows:
            print(f"kmon: note: {name}: kept the top {table.num_rows:,} of "
                  f"{jobs.total_rows(table):,} rows (--max-rows)", file=sys.stderr)
    report.show(report.text_console(), jobs.ANALYSES, tables, args.top)
    if args.out is not None:
        try:
            with _open_out(args.out) as out:
                written = report.write_tables(tables, out) + report.write_charts(tables, out)
        except OSError as err:
            raise UserError(f"cannot write to {args.out}: {err.strerror or err}") from err
        print(f"kmon: wrote {len(written)} files to {args.out}", file=sys.stderr)
    return 0


def _open_out(path: Path) -> OutputDir:
    """``--out`` as a verified output directory (see kmon.files.OutputDir); UserError if not."""
    try:
        return OutputDir.open_writable(path)
    except UnsafeFile as err:
        raise UserError(f"--out: {err}") from err

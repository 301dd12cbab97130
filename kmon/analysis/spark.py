"""The Spark session of an analysis: which master, which settings, and a quiet JVM.

The master is ``--master``, else ``$SPARK_MASTER``, else the one ``spark-submit``
gave (when kmon runs under it), else ``local[*]``. A JVM that kmon launches
writes its log to a file of its own instead of the terminal; the file is
removed after a clean run and named in the error otherwise.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from py4j.protocol import Py4JError
from pyspark import SparkContext
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from kmon.analysis import classes
from kmon.errors import UserError
from kmon.sources.processes.child_env import launching_with, spark_launch_environment

BYTES_PER_PARTITION = 16 << 20  # of Parquet input, per shuffle partition
MAX_SHUFFLE_PARTITIONS = 200
DEFAULTS = {
    "spark.app.name": "kmon analyze",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    # host=10 stays the string "10", date=2026-01-01 stays a string
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    # kmon has checked every file already: listing them in a Spark job only adds a job
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "1000000",
}
# a recording of less than one shuffle partition: compiling costs more than it saves
SMALL_INPUT = {
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",  # the JIT's quick tier only
    "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.adaptive.enabled": "false",  # one partition: nothing to adapt, fewer jobs
}
SPARK_ERRORS = (PySparkException, Py4JError)


def under_spark_submit() -> bool:
    """True when ``spark-submit`` started this Python process (its JVM is waiting)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def resolve_master(flag: str | None) -> str | None:
    """The master URL to set; None leaves spark-submit's own."""
    if flag:
        return flag
    if os.environ.get("SPARK_MASTER"):
        return os.environ["SPARK_MASTER"]
    return None if under_spark_submit() else "local[*]"


def shuffle_partitions(input_bytes: int) -> int:
    """One shuffle partition per ``BYTES_PER_PARTITION`` of input: a small recording's
    jobs are not split into hundreds of tiny tasks."""
    return max(1, min(MAX_SHUFFLE_PARTITIONS, math.ceil(input_bytes / BYTES_PER_PARTITION)))


def settings(master: str | None, conf: dict[str, str], input_bytes: int = 0) -> dict[str, str]:
    """kmon's defaults for ``input_bytes`` of Parquet, then ``conf`` (``--conf KEY=VALUE``)
    over them."""
    merged = dict(DEFAULTS)
    merged["spark.sql.shuffle.partitions"] = str(shuffle_partitions(input_bytes))
    if input_bytes < BYTES_PER_PARTITION:
        merged.update(SMALL_INPUT)
    if master:
        merged["spark.master"] = master
    merged.update(conf)
    return merged


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Point file descriptor 2 at ``path`` while a JVM child inherits it."""
    saved = os.dup(2)
    try:
        with open(path, "ab") as log:
            os.dup2(log.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def start(master: str | None, conf: dict[str, str], input_bytes: int,
          log: Path) -> tuple[SparkSession, classes.Dump | None]:
    """A Spark session, and the class archive its JVM is to write (see kmon.analysis.classes;
    None: it has one, another run is writing it, or kmon did not launch the JVM); a JVM
    launched for it writes its stderr to ``log``."""
    options, dump = settings(master, conf, input_bytes), None
    launch = not under_spark_submit() and SparkContext._gateway is None
    if launch and "spark.driver.extraJavaOptions" not in conf:
        extra, dump = classes.java_options(classes.archive_path())
        own = options.get("spark.driver.extraJavaOptions", "")
        options["spark.driver.extraJavaOptions"] = f"{own} {extra}".strip()
    builder = SparkSession.builder
    for key, value in options.items():
        builder = builder.config(key, value)
    try:
        if launch:
            clean = spark_launch_environment(os.environ, as_root=os.geteuid() == 0)
            with _stderr_to(log), launching_with(clean):
                spark = builder.getOrCreate()
        else:
            spark = builder.getOrCreate()
    except SPARK_ERRORS as err:
        if dump is not None:
            dump.release()  # another run may write the archive: this one has no session
        raise UserError(f"cannot start Spark (master {master or 'from spark-submit'}): "
                        f"{first_line(err)}; Spark's log: {log}") from err
    spark.sparkContext.setLogLevel("WARN")
    return spark, dump


@contextlib.contextmanager
def session(master: str | None, conf: dict[str, str],
            input_bytes: int = 0) -> Iterator[SparkSession]:
    """A Spark session for ``input_bytes`` of Parquet, for the ``with`` block; Spark errors
    become one-line UserErrors."""
    fd, name = tempfile.mkstemp(prefix="kmon-spark-", suffix=".log")
    os.close(fd)
    log = Path(name)
    spark, dump = start(master, conf, input_bytes, log)
    try:
        yield spark
    except SPARK_ERRORS as err:
        raise UserError(f"Spark failed: {first_line(err)}; Spark's log: {log}") from err
    else:
        log.unlink(missing_ok=True)
    finally:
        spark.stop()
        if dump is not None:
            classes.keep(dump, classes.archive_path())


def first_line(err: BaseException) -> str:
    """The first informative line of a (possibly Java) exception."""
    lines = [line.strip(" :\t") for line in str(err).splitlines() if line.strip(" :\t")]
    for line in lines:
        if not line.startswith(("An error occurred while calling", "JVM stacktrace")):
            return line[:300]
    return type(err).__name__

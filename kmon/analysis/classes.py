"""A class-data archive (AppCDS) for the driver JVM kmon launches: Spark's classes mapped
from one file instead of found, loaded and verified from its jars each run.

A session without one runs with ``-XX:ArchiveClassesAtExit``; when it ends, kmon ends
its JVM, which writes the archive as it exits, and keeps it in ``~/.cache/kmon``
(``$XDG_CACHE_HOME``) for the next runs. The name holds pyspark's version and a hash
of its path, whose jars the archive must match; a JVM that cannot use it (another
Java, say) says so in Spark's log and runs without it. Delete the file to rebuild it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

QUIET = "-Xlog:disable -Xlog:all=warning:stderr"  # the JVM's own warnings to Spark's log


def archive_path() -> Path:
    """Where the archive of this pyspark install lives."""
    import pyspark

    home = str(Path(pyspark.__file__).resolve().parent)
    digest = hashlib.sha1(home.encode()).hexdigest()[:10]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "kmon" / f"spark-{pyspark.__version__}-{digest}.jsa"


def java_options(archive: Path) -> tuple[str, Path | None]:
    """The driver's JVM options for ``archive``, and the file the JVM is to write it to
    (None when it exists, or when its directory cannot be made)."""
    if archive.is_file():
        return f"-XX:SharedArchiveFile={archive} {QUIET}", None
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return "", None
    partial = archive.with_name(f"{archive.name}.{os.getpid()}.tmp")
    return f"-XX:ArchiveClassesAtExit={partial} {QUIET}", partial


def keep(partial: Path, archive: Path, timeout: float = 120) -> None:
    """End the stopped session's JVM, which writes ``partial`` as it exits, and keep that
    as ``archive``."""
    from pyspark import SparkContext

    jvm = SparkContext._gateway.proc
    jvm.stdin.close()  # pyspark's gateway exits when its stdin closes
    try:
        jvm.wait(timeout)
    except subprocess.TimeoutExpired:
        jvm.kill()
        jvm.wait()
    SparkContext._gateway = SparkContext._jvm = None  # a later session launches its own
    try:
        if jvm.returncode == 0 and partial.is_file():
            os.replace(partial, archive)
    finally:
        partial.unlink(missing_ok=True)

"""A class-data archive (AppCDS) for the driver JVM kmon launches: Spark's classes mapped
from one file instead of found, loaded and verified from its jars each run.

A session without one runs with ``-XX:ArchiveClassesAtExit``; when it ends, kmon ends
its JVM, which writes the archive as it exits, and keeps it in ``~/.cache/kmon/spark``
(``$XDG_CACHE_HOME``; as root ``/var/cache/kmon/spark``, never a directory another user
could swap: the JVM maps the archive's classes as code) for the next runs. The name
holds pyspark's version and a hash of its path and of its jars folder's identity (inode
and time: pyspark installed again at the same path makes another archive, since the JVM
refuses one made from other jars); a JVM that cannot use it (another Java, say) says so
in Spark's log and runs without it. One JVM at a time writes an archive into the cache (a
lock on the directory, let go when kmon ends): runs that start meanwhile go without one
rather than each spend the seconds of CPU and the 170 MB of a dump of their own. The
cache keeps the ``KEPT`` newest archives (each virtual environment has its own); delete a
file to rebuild it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kmon.files import UnsafeFile, private_cache_dir, private_file

QUIET = "-Xlog:disable -Xlog:all=warning:stderr"  # the JVM's own warnings to Spark's log
KEPT = 4  # archives kept in the cache, the newest (some 170 MB each)


def archive_path() -> Path | None:
    """Where the archive of this pyspark install lives (None: no private cache directory)."""
    import pyspark

    digest = install_digest(Path(pyspark.__file__).resolve().parent)
    try:
        cache = private_cache_dir("spark")
    except UnsafeFile:
        return None
    return cache / f"spark-{pyspark.__version__}-{digest}.jsa"


def install_digest(home: Path) -> str:
    """A short hash of a pyspark install: its path, and its jars folder's inode and time."""
    try:
        jars = os.stat(home / "jars")
        identity = f"{home}\0{jars.st_dev}:{jars.st_ino}:{jars.st_mtime_ns}"
    except OSError:
        identity = str(home)
    return hashlib.sha1(identity.encode()).hexdigest()[:10]


def prune(cache: Path, kept: int = KEPT) -> None:
    """Remove all but the ``kept`` newest archives (``spark-*.jsa``, this user's regular
    files) from ``cache``."""
    archives = sorted((path for path in cache.glob("spark-*.jsa") if private_file(path)),
                      key=lambda path: path.stat().st_mtime_ns, reverse=True)
    for old in archives[kept:]:
        old.unlink(missing_ok=True)


@dataclass(frozen=True)
class Dump:
    """The file a launched JVM writes the archive to as it exits, and the lock on the cache
    directory that makes it the only writer until ``keep`` lets go."""

    partial: Path
    lock: int  # a descriptor of the cache directory, locked (flock) while it is held

    def release(self) -> None:
        os.close(self.lock)  # the lock goes with its last descriptor


def _writer_lock(cache: Path) -> int | None:
    """A descriptor of ``cache`` holding its exclusive lock; None while another holds it."""
    fd = os.open(cache, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def java_options(archive: Path | None) -> tuple[str, Dump | None]:
    """The driver's JVM options for ``archive``, and where the JVM is to write it (None
    when it exists, when another run is writing it, or when there is no private place for
    it). An archive that is not this user's own regular file, writable by no one else, is
    never used."""
    if archive is None:
        return "", None
    if not archive.exists() and not archive.is_symlink():
        try:
            lock = _writer_lock(archive.parent)
        except OSError:
            return "", None
        if lock is None:
            return "", None
        if not archive.exists() and not archive.is_symlink():  # not written meanwhile
            partial = archive.with_name(f"{archive.name}.{os.getpid()}.tmp")
            return f"-XX:ArchiveClassesAtExit={partial} {QUIET}", Dump(partial, lock)
        os.close(lock)
    if private_file(archive):
        return f"-XX:SharedArchiveFile={archive} {QUIET}", None
    return "", None


def keep(dump: Dump, archive: Path | None, timeout: float = 120) -> None:
    """End the stopped session's JVM, which writes ``dump.partial`` as it exits, keep that
    as ``archive``, and let another run write one again."""
    try:
        _keep(dump.partial, archive, timeout)
    finally:
        dump.release()


def _keep(partial: Path, archive: Path | None, timeout: float) -> None:
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:  # no JVM is running: none writes ``partial``
        partial.unlink(missing_ok=True)
        return
    jvm = gateway.proc
    jvm.stdin.close()  # pyspark's gateway exits when its stdin closes
    try:
        jvm.wait(timeout)
    except subprocess.TimeoutExpired:
        jvm.kill()
        jvm.wait()
    SparkContext._gateway = SparkContext._jvm = None  # a later session launches its own
    try:
        if archive is not None and jvm.returncode == 0 and private_file(partial):
            os.replace(partial, archive)
            prune(archive.parent)
    finally:
        partial.unlink(missing_ok=True)

"""A throwaway Spark standalone cluster on this machine, for tests and benchmarks.

The master and workers are pyspark's own JVMs, started with its ``bin/spark-class``
(pip's pyspark ships no ``sbin/start-master.sh``), bound to 127.0.0.1 on free
ports, each logging to a file; every one of them is stopped when the block ends.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from kmon.sources.processes.child_env import spark_launch_environment

HOST = "127.0.0.1"
MASTER_STARTED = re.compile(r"Starting Spark master at (spark://\S+)")
WORKER_REGISTERED = re.compile(r"Successfully registered with master")
# what the driver of an application on this cluster needs to be reachable from it
DRIVER_CONF = {"spark.driver.host": HOST, "spark.driver.bindAddress": HOST}
# the master's and workers' JVMs, and the launcher JVM spark-class runs before each: their
# start is class loading and warm-up, their load small (C1 alone and one GC thread, as a
# Kafka node of kafka_cluster)
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def spark_class() -> Path:
    """pyspark's ``bin/spark-class``, which runs a Spark JVM main class."""
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def _wait_for(pattern: re.Pattern, log: Path, proc: subprocess.Popen, timeout: float) -> str:
    """The first match of ``pattern`` in the growing ``log`` of ``proc``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = pattern.search(log.read_text(errors="replace"))
        if match:
            return match.group(match.re.groups)
        if proc.poll() is not None:
            raise RuntimeError(f"{log.name}: exited with {proc.returncode}: "
                               f"{log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.2)
    raise TimeoutError(f"{log.name}: no {pattern.pattern!r} within {timeout:g} s")


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in reversed(procs):
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def standalone(workers: int = 2, cores: int = 1, memory: str = "1g",
               timeout: float = 90) -> Iterator[str]:
    """The ``spark://`` URL of a running master with ``workers`` registered workers of
    ``cores`` cores and ``memory`` each."""
    env = {**spark_launch_environment(os.environ, as_root=os.geteuid() == 0),
           "SPARK_LOCAL_IP": HOST, "SPARK_DAEMON_JAVA_OPTS": QUICK_JVM,
           "SPARK_LAUNCHER_OPTS": QUICK_JVM}
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="kmon-spark-cluster-") as tmp:

        def start(name: str, *args: str) -> tuple[subprocess.Popen, Path]:
            log = Path(tmp) / f"{name}.log"
            with open(log, "wb") as out:
                procs.append(subprocess.Popen([str(spark_class()), *args], stdout=out,
                                              stderr=subprocess.STDOUT, env=env, cwd=tmp))
            return procs[-1], log

        try:
            master = start("master", "org.apache.spark.deploy.master.Master", "--host", HOST,
                           "--port", "0", "--webui-port", "0")
            url = _wait_for(MASTER_STARTED, master[1], master[0], timeout)
            started = [start(f"worker-{n}", "org.apache.spark.deploy.worker.Worker", "--host",
                             HOST, "--cores", str(cores), "--memory", memory, "--webui-port",
                             "0", "--work-dir", f"{tmp}/work-{n}", url)
                       for n in range(workers)]
            for proc, log in started:
                _wait_for(WORKER_REGISTERED, log, proc, timeout)
            yield url
        finally:
            _stop(procs)

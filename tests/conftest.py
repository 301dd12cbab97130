"""Real parts for kmon's tests: a mock Kafka cluster, client processes, the kmon CLI."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
REPO = TESTS.parent


class Child:
    """A subprocess whose stdout lines are read in the background."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env, bufsize=1)
        self.lines: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines.put),
                         daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self.stderr.append),
                         daemon=True).start()

    @staticmethod
    def _pump(stream, sink) -> None:
        for line in stream:
            sink(line.rstrip("\n"))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_line(self, prefix: str, timeout: float = 40.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (self.proc.poll() is not None and self.lines.empty()):
                raise AssertionError(f"no {prefix!r} line from {self.proc.args}; "
                                     f"stderr: {self.stderr[-5:]}")
            try:
                line = self.lines.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                continue
            if line.startswith(prefix):
                return line

    def send(self, command: str) -> None:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class KafkaClient(Child):
    """kmon.devtools.workload: a real confluent-kafka client driven through stdin."""

    def all_stats(self) -> dict[str, dict]:
        """{instance name: statistics} as the clients' own stats_cb last saw them."""
        self.send("stats")
        return json.loads(self.wait_line("STATS ")[len("STATS "):])

    def own_stats(self) -> dict:
        """The statistics of a process's only client."""
        (stats,) = self.all_stats().values()
        return stats


# Fixtures that start real processes, a cluster or Spark: a test using one is an integration
# test (``python -m pytest -m "not integration"`` is the fast inner loop).
INTEGRATION_FIXTURES = {"cluster", "start_client", "start_client_at", "spool_dir",
                        "spark_session", "kafka", "start_kafka", "java_clients", "start_java"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses a process-starting fixture as ``integration``."""
    for item in items:
        if INTEGRATION_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def spool_dir(tmp_path_factory) -> Path:
    """A private spool for this test run, seen by kmon and by every client (the environment
    is restored when the run ends)."""
    path = tmp_path_factory.mktemp("spool")
    path.chmod(0o700)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KMON_SPOOL_DIR", str(path))
        yield path


@pytest.fixture(scope="session")
def cluster(spool_dir) -> str:
    """Bootstrap string of a 3-broker mock cluster running in a subprocess."""
    child = Child([sys.executable, "-m", "kmon", "devcluster", "--brokers", "3"])
    try:
        bootstrap = child.wait_line("127.0.0.1:", timeout=30)
        yield bootstrap
    finally:
        child.stop()


@pytest.fixture(scope="session")
def kafka():
    """A real 3-node Apache Kafka cluster (KRaft, PLAINTEXT + SASL_PLAINTEXT + SSL listeners),
    shared by the whole run. A test that kills a node starts it again before it ends."""
    from kmon.devtools.kafka_cluster import KafkaCluster

    require_java()
    with KafkaCluster(brokers=3) as cluster:
        yield cluster


@pytest.fixture
def start_kafka():
    """Start a real cluster of one's own: start_kafka(brokers=1, **{"connections.max.idle.ms":
    "4000"}); stopped when the test ends."""
    from kmon.devtools.kafka_cluster import KafkaCluster

    require_java()
    started: list[KafkaCluster] = []

    def start(brokers: int = 1, **broker_config: str) -> KafkaCluster:
        cluster = KafkaCluster(brokers, broker_config)
        started.append(cluster)
        return cluster.start()

    yield start
    for cluster in started:
        cluster.stop()


# The real Java clients tested: kafka-clients from Maven Central with slf4j-simple for its log
# (slf4j-api declared first, so that the binding's own slf4j version wins).
JAVA_CLIENTS = {
    "4.4.0": ("org.slf4j:slf4j-api:2.0.17", "org.apache.kafka:kafka-clients:4.4.0",
              "org.slf4j:slf4j-simple:2.0.17"),
    "3.9.1": ("org.apache.kafka:kafka-clients:3.9.1", "org.slf4j:slf4j-simple:1.7.36"),
}
JAVA_PROGRAM = TESTS / "java" / "KafkaClientProgram.java"


@pytest.fixture(scope="session")
def java_clients() -> dict[str, str]:
    """Classpath of each tested kafka-clients release, fetched with Maven once into kmon's
    cache (``kmon.devtools.maven_jars``) and reused after."""
    from kmon.devtools import maven_jars

    require_java()
    try:
        return {version: maven_jars.classpath(maven_jars.resolved_jars(f"clients-{version}",
                                                                       artifacts))
                for version, artifacts in JAVA_CLIENTS.items()}
    except maven_jars.JarsUnavailable as err:
        pytest.skip(str(err))


def debug_log_options(log: Path) -> list[str]:
    """slf4j-simple's system properties for a DEBUG log with ISO times in ``log``."""
    prefix = "-Dorg.slf4j.simpleLogger."
    return [f"{prefix}logFile={log}", f"{prefix}defaultLogLevel=debug",
            f"{prefix}showDateTime=true", f"{prefix}dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSSXXX"]


@pytest.fixture
def start_java(kafka, java_clients):
    """Start tests/java/KafkaClientProgram.java (a real Java client) on the shared cluster:
    start_java("consumer", "--group", "g", version="3.9.1", log=path, jvm=[...])."""
    started: list[Child] = []

    def start(mode: str, *args: str, version: str = "4.4.0", log: Path | None = None,
              jvm: tuple[str, ...] = ()) -> Child:
        argv = ["java", "-XX:TieredStopAtLevel=1", *jvm, "-cp", java_clients[version],
                *(debug_log_options(log) if log else []), str(JAVA_PROGRAM), mode,
                kafka.bootstrap(), *args]
        child = Child(argv)
        started.append(child)
        child.wait_line("READY", timeout=120)
        return child

    yield start
    for child in started:
        child.stop()


def require_java() -> None:
    if shutil.which("java") is None:
        pytest.skip("java (a JDK 17+) is not installed: a real Kafka cluster needs it")


@pytest.fixture
def start_client(start_client_at, cluster):
    """Start a client process: start_client("consumer", instrument=True, idle_ms=3000)."""
    return lambda kind, **options: start_client_at(cluster, kind, **options)


@pytest.fixture
def start_client_at(spool_dir):
    """Start a client process of a given cluster: start_client_at(bootstrap, "consumer",
    properties={"security.protocol": "SSL", ...}, ready=True); stopped when the test ends."""
    started: list[KafkaClient] = []

    def start(bootstrap: str, kind: str, instrument: bool = True, idle_ms: int | None = None,
              wrapper: list[str] | None = None, properties: dict[str, str] | None = None,
              extra_args: tuple[str, ...] = (), ready: bool = True) -> KafkaClient:
        argv = [sys.executable, "-m", "kmon.devtools.workload", kind, bootstrap, *extra_args]
        if instrument:
            argv.append("--instrument")
        if idle_ms is not None:
            argv += ["--idle-ms", str(idle_ms)]
        for key, value in (properties or {}).items():
            argv += ["-X", f"{key}={value}"]
        client = KafkaClient((wrapper or []) + argv)
        started.append(client)
        if ready:
            client.wait_line("READY")
        return client

    yield start
    for client in started:
        client.stop()


def kmon(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run the real kmon command line."""
    return subprocess.run([sys.executable, "-m", "kmon", *args], capture_output=True,
                          text=True, timeout=timeout)


def attach_once(pid: int, *extra: str) -> dict:
    """``kmon attach PID --once --json``, parsed; fails the test on a non-zero exit."""
    result = kmon("attach", str(pid), "--once", "--json", *extra)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def connections_of(snapshot: dict) -> list[dict]:
    (process,) = snapshot["processes"]
    return process["connections"]


def assert_one_clear_line(result: subprocess.CompletedProcess, code: int, *words: str) -> None:
    assert result.returncode == code, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.fixture
def throwaway_user():
    """A user made for this test (home included) and removed after it, even on failure."""
    import pwd
    import uuid

    name = f"kmon{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", name], check=True,
                   capture_output=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
        subprocess.run(["userdel", "--remove", name], capture_output=True)


def python_as(user: str) -> tuple[list[str], dict[str, str]]:
    """(argv prefix, environment) running this test's Python code as ``user``.

    The test's own interpreter may live where other users cannot read it (pyenv
    under /root): the system's interpreter of the same minor version is used,
    with this environment's site-packages added as a site directory (so that the
    installed kmon, ``kmon.widgets`` included, imports as here). Skips the test
    where there is none.
    """
    import sysconfig
    import tempfile

    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    system = Path("/usr/bin") / version
    if not system.exists():
        pytest.skip(f"no {system} that another user can run")
    packages = sysconfig.get_paths()["purelib"]
    boot = Path(tempfile.mkdtemp(prefix="kmon-site-"))
    boot.chmod(0o755)
    (boot / "sitecustomize.py").write_text(f"import site\nsite.addsitedir({packages!r})\n")
    (boot / "sitecustomize.py").chmod(0o644)
    env = {k: v for k, v in os.environ.items() if k not in ("KMON_SPOOL_DIR", "PYTHONHOME")}
    env["PYTHONPATH"] = str(boot)
    return ["runuser", "-u", user, "--", str(system)], env


def unused_pid() -> int:
    pid = 4_000_000
    while os.path.exists(f"/proc/{pid}"):
        pid += 1
    return pid

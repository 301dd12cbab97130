"""Real parts for kmon's tests, as fixtures: a mock Kafka cluster, a real Apache Kafka cluster,
client processes, a throwaway user (the helpers they share are in helpers.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from helpers import (
    TESTS,
    Child,
    KafkaClient,
    acquire,
    debug_log_options,
    made_once,
    refuse_processes,
    release,
    require_java,
)

# Fixtures that start real processes, a user, a cluster or Spark. A test that starts one (or
# starts a process itself) is an integration test, and says so where it is written: a module's
# ``pytestmark``, or a decorator in a module that mixes both kinds. Every other test is marked
# ``unit`` here (``python -m pytest -m unit`` is the fast inner loop), and may start no process.
INTEGRATION_FIXTURES = {"cluster", "start_client", "start_client_at", "spool_dir",
                        "spark_session", "kafka", "kafka_one_node", "start_kafka",
                        "java_clients", "java_program", "start_java", "start_module_client",
                        "start_on", "throwaway_user"}
# What a fixture needs beyond this Python: the marker it gives the tests that use it.
NEEDS = {"kafka": "kafka", "kafka_one_node": "kafka", "start_kafka": "kafka",
         "spark_session": "spark", "java_clients": "java", "java_program": "java",
         "start_java": "java", "throwaway_user": "root"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test not marked ``integration`` as ``unit``, and each test with what its
    fixtures need (``NEEDS``); refuse the run when a unit test uses a process-starting
    fixture. A test marked ``root`` is skipped unless kmon's tests run as root."""
    unmarked = []
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        for needed in sorted({NEEDS[name] for name in fixtures & NEEDS.keys()}):
            item.add_marker(needed)
        if item.get_closest_marker("integration") is None:
            item.add_marker(pytest.mark.unit)
            if INTEGRATION_FIXTURES & fixtures:
                unmarked.append(item.nodeid)
        root = item.get_closest_marker("root")
        if root is not None and os.geteuid() != 0:
            item.add_marker(pytest.mark.skip(reason=root.kwargs.get("reason", "needs root")))
    if unmarked:
        raise pytest.UsageError("tests that start real processes must be marked integration "
                                f"(pytestmark or @pytest.mark.integration): {unmarked}")


CALL_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Note whether a test's call failed (for the refusal below)."""
    report = yield
    if report.when == "call":
        item.stash[CALL_FAILED] = report.failed
    return report


@pytest.fixture(autouse=True)
def _unit_tests_start_no_process(request):
    """A unit test that starts a process (a user, a compiler, a cluster, kmon's command line)
    fails, naming the call: the unit tier's promise is that it starts none. A test that
    caught the refusal fails at its teardown."""
    if request.node.get_closest_marker("unit") is None:
        yield
        return
    refused: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        refuse_processes(patch, refused)
        yield
    if refused and not request.node.stash.get(CALL_FAILED, False):
        pytest.fail(f"a unit test started a process ({', '.join(refused)}): mark it integration",
                    pytrace=False)


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


RUN_END = pytest.StashKey[list]()  # what a session does last (``pytest_sessionfinish``)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop what this worker started for the whole run (``kafka``), once the others are done
    with it: after every test's time limit, before the worker tells xdist it is finished."""
    for stop in session.config.stash.get(RUN_END, []):
        stop()


def run_directory(tmp_path_factory) -> Path:
    """The directory every xdist worker of this run sees (the run's base temporary
    directory; without xdist, this process's own)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def kafka(request, tmp_path_factory):
    """A real 3-node Apache Kafka cluster (KRaft, PLAINTEXT + SASL_PLAINTEXT + SSL listeners),
    shared by the whole run: the first xdist worker that needs it starts it and stops it
    once the last is done, the others attach to it (``support.run_shared``). Its nodes are
    never killed: a test that kills one starts a cluster of its own (``start_kafka``)."""
    from kmon.devtools.kafka_cluster import KafkaCluster

    require_java()
    directory = run_directory(tmp_path_factory)
    owned = contextlib.ExitStack()
    cluster, started = acquire(directory, "kafka",
                               lambda: owned.enter_context(KafkaCluster(brokers=3)),
                               KafkaCluster.save, KafkaCluster.attach)
    yield cluster
    if not started:
        release(directory, "kafka", started=False)
        return

    def stop() -> None:
        keep_logs_of_dead_nodes(cluster)
        with owned:
            release(directory, "kafka", started=True)

    request.config.stash.setdefault(RUN_END, []).append(stop)


def keep_logs_of_dead_nodes(cluster) -> None:
    """The shared cluster's nodes are never killed, yet one died in a CI run (every test
    on it failed after): a node found dead at the run's end leaves its exit code and logs
    in ``/tmp/kmon-kafka-died-*``, which stopping the cluster does not remove."""
    for node in cluster.nodes:
        code = node.exit_code()
        if code is None:
            continue
        kept = Path(tempfile.mkdtemp(prefix=f"kmon-kafka-died-node{node.node_id}-", dir="/tmp"))
        (kept / "exit_code").write_text(f"{code}\n")
        for name in ("jvm.out", "server.log"):
            with contextlib.suppress(OSError):
                shutil.copy(node.directory / name, kept)


@pytest.fixture(scope="session")
def kafka_one_node():
    """A real one-node Apache Kafka cluster of the default settings, shared by the run's
    tests that need every socket of a client to reach one broker and leave the node
    running (a test that kills a node, or needs other settings, starts its own)."""
    from kmon.devtools.kafka_cluster import KafkaCluster

    require_java()
    with KafkaCluster(brokers=1) as cluster:
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


@pytest.fixture(scope="session")
def go_consumer(tmp_path_factory) -> str:
    """tests/go's consumer program, built once a run by the first xdist worker that needs
    it (the module cache and build cache reused)."""
    from kmon.devtools.client_programs import go_build

    def build() -> str:
        binary = run_directory(tmp_path_factory) / "kmon-go-consumer"
        result = go_build(TESTS / "go", binary)
        assert result.returncode == 0, result.stderr[-2000:]
        return str(binary)

    return made_once(run_directory(tmp_path_factory), "go-consumer", build)


@pytest.fixture(scope="session")
def spark_session():
    """One local Spark session (local[2]) for the run's in-process analyses. It maps the class
    archive a ``kmon analyze`` run keeps, when there is one, but never writes one itself: its
    JVM would spend its last ten seconds dumping one that the first analyze run writes."""
    pytest.importorskip("pyspark")
    from kmon.analysis import classes, spark

    archive = classes.archive_path()
    keep_none = {"spark.driver.extraJavaOptions":
                 spark.SMALL_INPUT["spark.driver.extraJavaOptions"]}
    with spark.session("local[2]", {} if archive and archive.exists() else keep_none) as session:
        yield session


JAVA_PROGRAM = TESTS / "java" / "KafkaClientProgram.java"


@pytest.fixture(scope="session")
def java_clients() -> dict[str, str]:
    """Classpath of each tested kafka-clients release, fetched with Maven once into kmon's
    cache (``kmon.devtools.maven_jars``) and reused after."""
    from kmon.devtools import client_programs, maven_jars

    require_java()
    try:
        return {version: client_programs.java_jars(version)
                for version in client_programs.JAVA_CLIENTS}
    except maven_jars.JarsUnavailable as err:
        pytest.skip(str(err))


@pytest.fixture(scope="session")
def java_program(java_clients, tmp_path_factory) -> dict[str, str]:
    """The classpath that runs KafkaClientProgram on each tested release: the program
    compiled once a run, by the first xdist worker that needs it (the source launcher would
    compile it again at every start)."""
    from kmon.devtools.client_programs import compile_java

    directory = run_directory(tmp_path_factory)
    return made_once(directory, "java-program", lambda: {
        version: compile_java(JAVA_PROGRAM, jars, directory / f"java-{version}")
        for version, jars in java_clients.items()})


@pytest.fixture
def start_java(kafka, java_program):
    """Start tests/java/KafkaClientProgram.java (a real Java client) on the shared cluster:
    start_java("consumer", "--group", "g", version="3.9.1", log=path, jvm=[...])."""
    started: list[Child] = []

    def start(mode: str, *args: str, version: str = "4.4.0", log: Path | None = None,
              jvm: tuple[str, ...] = ()) -> Child:
        argv = ["java", "-XX:TieredStopAtLevel=1", *jvm, "-cp", java_program[version],
                *(debug_log_options(log) if log else []), JAVA_PROGRAM.stem, mode,
                kafka.bootstrap(), *args]
        child = Child(argv)
        started.append(child)
        child.wait_line("READY", timeout=120)
        return child

    yield start
    for child in started:
        child.stop()


@pytest.fixture
def start_client(start_client_at, cluster):
    """Start a client process: start_client("consumer", instrument=True, idle_ms=3000)."""
    return lambda kind, **options: start_client_at(cluster, kind, **options)


def client_starter(started: list[KafkaClient]):
    """start(bootstrap, kind, ...): a client process, appended to ``started``."""

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

    return start


@pytest.fixture
def start_client_at(spool_dir):
    """Start a client process of a given cluster: start_client_at(bootstrap, "consumer",
    properties={"security.protocol": "SSL", ...}, ready=True); stopped when the test ends."""
    started: list[KafkaClient] = []
    yield client_starter(started)
    for client in started:
        client.stop()


@pytest.fixture(params=["mock", pytest.param("kafka", marks=pytest.mark.kafka)])
def start_on(request, start_client_at):
    """start_client on each cluster in turn: the mock cluster, then the session's real Apache
    Kafka cluster (a test written once, run against both)."""
    cluster = request.getfixturevalue("cluster" if request.param == "mock" else "kafka")
    bootstrap = cluster if request.param == "mock" else cluster.bootstrap()
    return lambda kind, **options: start_client_at(bootstrap, kind, **options)


@pytest.fixture(scope="module")
def start_module_client(spool_dir, cluster):
    """start_client for clients that a whole module's tests only look at: started once,
    stopped when the module's tests are done."""
    started: list[KafkaClient] = []
    start = client_starter(started)
    yield lambda kind, **options: start(cluster, kind, **options)
    for client in started:
        client.stop()


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


@pytest.fixture(scope="module")
def private_cache(tmp_path_factory):
    """A fresh cache for kmon's JMX helper (XDG_CACHE_HOME, restored after the module), so the
    compile path runs and the user's cache is untouched."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
        yield

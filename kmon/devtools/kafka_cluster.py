"""A real Apache Kafka cluster on loopback: KRaft nodes, each a combined broker+controller JVM.

Every node listens on five loopback ports: PLAINTEXT (the bootstrap string),
SASL_PLAINTEXT (PLAIN, a user made up at start), SSL (a key pair made with
``keytool``, once a process), SASL_SSL (that user over that key pair) and CONTROLLER.
Everything lives in one private working directory, removed when the cluster
stops. A node is stopped with SIGKILL, as its data is thrown away anyway (a
graceful stop of the last nodes of a KRaft quorum waits for a quorum that is
gone), and is killed if the process that started it dies. Another process reaches a started
cluster through a view of it, ``KafkaCluster.attach(cluster.save())``: its addresses, keys and
client configs, never its nodes to kill, start or stop (kmon's test workers share one so).

The nodes' JVMs map a class-data archive (AppCDS) of Kafka's classes kept in kmon's cache
(``/var/cache/kmon/kafka`` as root, else ``~/.cache/kmon/kafka``): the first start
formats a node with ``-XX:ArchiveClassesAtExit``, the storage tool's classes written as it
exits; every later format and node start maps them instead of loading and verifying them
from the jars again. Its name holds a hash of the JDK and the jars (path, size, time), so
other jars make another; delete the file to rebuild it.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from kmon.devtools import maven_jars
from kmon.devtools.children import die_with_parent
from kmon.files import UnsafeFile, private_cache_dir, private_file
from kmon.sources.processes import own_processes
from kmon.sources.processes.child_env import jvm_environment, trusted_program

LISTENERS = ("PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL", "CONTROLLER")
SASL_LISTENERS = ("SASL_PLAINTEXT", "SASL_SSL")
SASL_USER = "kmon"
HEAP = "-Xmx384m"
QUICK_JVM = ("-J-XX:+UseSerialGC", "-J-XX:TieredStopAtLevel=1")  # keytool: C1 alone, as a node
QUIET_CDS = "-Xlog:cds=off,cds+dynamic=off"  # an archive it cannot map is no error of a node
# java -> (keystore password, broker.p12, ca.pem): keytool's key pair, made once a process
_KEY_PAIRS: dict[str, tuple[str, bytes, bytes]] = {}
SMALL_AND_FAST = {
    "num.network.threads": "1",
    "num.io.threads": "2",
    "log.cleaner.dedupe.buffer.size": "2097152",
    "log.segment.bytes": "1048576",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "3",  # groups spread over the coordinators
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "num.partitions": "3",
    "default.replication.factor": "1",
}


class ClusterError(Exception):
    """The cluster could not be started (no Java, no jars, a node that would not start)."""


@dataclass
class KafkaNode:
    """One combined broker+controller: its ports, its directory and its JVM."""

    node_id: int
    ports: dict[str, int]
    directory: Path
    process: subprocess.Popen | None = None
    started_pid: int | None = None  # of a node another process started (``attach``)

    def address(self, listener: str = "PLAINTEXT") -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    @property
    def pid(self) -> int | None:
        if self.process is None:
            return self.started_pid
        return self.process.pid if self.process.poll() is None else None

    def exit_code(self) -> int | None:
        """The node's exit code once its JVM ended (-1 if it never started); None while it
        runs."""
        return -1 if self.process is None else self.process.poll()


@dataclass
class KafkaCluster:
    """``brokers`` nodes with ``broker_config`` on top of small, fast defaults."""

    brokers: int = 1
    broker_config: dict[str, str] = field(default_factory=dict)
    nodes: list[KafkaNode] = field(default_factory=list)
    workdir: Path | None = None
    sasl_password: str = ""
    attached: bool = False  # a view of a cluster another process started (``attach``)

    def bootstrap(self, listener: str = "PLAINTEXT") -> str:
        return ",".join(node.address(listener) for node in self.nodes)

    @property
    def home(self) -> Path:
        """The started cluster's directory: its keys, client configs and nodes."""
        if self.workdir is None:
            raise ClusterError("the Kafka cluster is not started")
        return self.workdir

    @property
    def ca_file(self) -> Path:
        return self.home / "ca.pem"

    def client_config(self, listener: str, dialect: str = "librdkafka") -> Path:
        """A properties file with what a client needs for ``listener`` (mode 0600)."""
        return self.home / f"{listener.lower()}-{dialect}.properties"

    def save(self) -> dict:
        """What another process needs to reach this started cluster (``attach``), as JSON."""
        return {"brokers": self.brokers, "broker_config": self.broker_config,
                "workdir": str(self.home), "sasl_password": self.sasl_password,
                "nodes": [{"node_id": node.node_id, "ports": node.ports,
                           "directory": str(node.directory), "pid": node.pid}
                          for node in self.nodes]}

    @classmethod
    def attach(cls, saved: dict) -> KafkaCluster:
        """A view of a cluster another process started and ``save``d: its addresses, keys
        and client configs. Its nodes are their starter's to kill, start and stop."""
        nodes = [KafkaNode(node["node_id"], node["ports"], Path(node["directory"]),
                           started_pid=node["pid"]) for node in saved["nodes"]]
        return cls(saved["brokers"], saved["broker_config"], nodes, Path(saved["workdir"]),
                   saved["sasl_password"], attached=True)

    def _refuse_if_attached(self, action: str) -> None:
        if self.attached:
            raise ClusterError(f"cannot {action} a node of a cluster another process started: "
                               "start one of its own")

    def prepare(self) -> None:
        """Find Java and the broker's jars (fetched with Maven the first time)."""
        self._java = _java()
        jars = maven_jars.resolved_jars(*maven_jars.BROKER_JARS)
        self._classpath = maven_jars.classpath(jars)
        self._archive = _archive_path(self._java, jars)

    def start(self, timeout_s: float = 120.0) -> KafkaCluster:
        """Start every node; tried a second time on new ports if a node does not start (its
        ports are picked free, then bound by the JVM: on a busy host another process can
        take one in between)."""
        self._refuse_if_attached("start")
        if not getattr(self, "_classpath", None):
            self.prepare()
        try:
            return self._start_once(timeout_s)
        except ClusterError:
            self.stop()
            return self._start_once(timeout_s)

    def _start_once(self, timeout_s: float) -> KafkaCluster:
        java, jars = self._java, self._classpath
        self.workdir = Path(_private_dir())
        self.sasl_password = secrets.token_urlsafe(12)
        ports = _free_ports(len(LISTENERS) * self.brokers)
        each = len(LISTENERS)
        self.nodes = [KafkaNode(n + 1, dict(zip(LISTENERS, ports[n * each:(n + 1) * each],
                                                strict=True)),
                                self.workdir / f"node-{n + 1}") for n in range(self.brokers)]
        made = _KEY_PAIRS.get(java)
        keystore_password = made[0] if made else secrets.token_urlsafe(12)
        self._write_client_configs()
        cluster_id = _cluster_id()
        for node in self.nodes:
            _write_node_files(node, self._node_config(node, keystore_password))
        shared, partial = _archive_options(self._archive)
        with ThreadPoolExecutor(self.brokers + 1) as pool:  # each a JVM: at once
            done = [pool.submit(_key_pair, java, self.workdir, keystore_password),
                    *(pool.submit(_format, java, jars, node, cluster_id,
                                  (f"-XX:ArchiveClassesAtExit={partial}" if partial and n == 0
                                   else shared, QUIET_CDS))
                      for n, node in enumerate(self.nodes))]
            try:
                for step in done:
                    step.result()
                if partial is not None and self._archive is not None and private_file(partial):
                    os.replace(partial, self._archive)
            finally:
                if partial is not None:
                    partial.unlink(missing_ok=True)
        for node in self.nodes:
            self.start_node(node)
        self.wait_ready(timeout_s)
        return self

    def start_node(self, node: KafkaNode) -> None:
        """Start (or restart, after ``kill``) the node's JVM on its own ports and data."""
        self._refuse_if_attached("start")
        log = open(node.directory / "jvm.out", "ab")  # noqa: SIM115 (the JVM's, closed below)
        with log:  # C1 alone: a node's start is class loading and warm-up, its load small
            node.process = subprocess.Popen(
                [self._java, HEAP, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                 _archive_options(self._archive)[0], QUIET_CDS, "-Djava.awt.headless=true",
                 f"-Dlog4j2.configurationFile={node.directory / 'log4j2.properties'}",
                 "-cp", self._classpath, "kafka.Kafka", str(node.directory / "server.properties")],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=jvm_environment(self._java),
                cwd=node.directory, preexec_fn=lambda: die_with_parent(signal.SIGKILL))
        own_processes.register(node.process.pid)  # kmon's machinery: never listed as a client

    def kill(self, node: KafkaNode) -> None:
        """SIGKILL the node's JVM, as a crash would."""
        self._refuse_if_attached("kill")
        if node.process and node.process.poll() is None:
            node.process.kill()
            node.process.wait()
            own_processes.unregister(node.process.pid)

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Until a Metadata request names every node and each listens on all its ports, or a
        JVM dies, or the time is up. A port another socket took between ``_free_ports`` and
        the node's bind ends that node once its acceptors start, after Metadata may already
        name it (seen in a test run: a node gone for the rest of the run)."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap(), "log_level": 0,
                             "socket.connection.setup.timeout.ms": 2000})
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for node in self.nodes:
                if (code := node.exit_code()) is not None:
                    raise ClusterError(f"Kafka node {node.node_id} exited with code "
                                       f"{code}: {_log_tail(node)}")
            with contextlib.suppress(Exception):
                if (len(admin.list_topics(timeout=2).brokers) == len(self.nodes)
                        and self._all_listening()):
                    return
            time.sleep(0.2)
        raise ClusterError(f"the Kafka cluster did not answer Metadata within {timeout_s:.0f}s")

    def _all_listening(self) -> bool:
        """Whether every node accepts a connection on each of its ports."""
        for node in self.nodes:
            for port in node.ports.values():
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=2).close()
                except OSError:
                    return False
        return True

    def stop(self) -> None:
        """Kill every JVM and remove the working directory."""
        self._refuse_if_attached("stop")
        for node in self.nodes:
            self.kill(node)
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> KafkaCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _node_config(self, node: KafkaNode, keystore_password: str) -> dict[str, str]:
        voters = ",".join(f"{n.node_id}@{n.address('CONTROLLER')}" for n in self.nodes)
        users = f'user_admin="{self.sasl_password}" user_{SASL_USER}="{self.sasl_password}"'
        advertised = ",".join(f"{name}://{node.address(name)}" for name in LISTENERS[:-1])
        login = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
                 f'username="admin" password="{self.sasl_password}" {users};')
        return {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": ",".join(f"{name}://{node.address(name)}" for name in LISTENERS),
            "advertised.listeners": advertised,
            "listener.security.protocol.map": ",".join(
                f"{name}:{'PLAINTEXT' if name == 'CONTROLLER' else name}" for name in LISTENERS),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(node.directory / "data"),
            "sasl.enabled.mechanisms": "PLAIN",
            **{f"listener.name.{name.lower()}.plain.sasl.jaas.config": login
               for name in SASL_LISTENERS},
            "ssl.keystore.location": str(self.home / "broker.p12"),
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.password": keystore_password,
            "ssl.key.password": keystore_password,
            **SMALL_AND_FAST,
            **self.broker_config,
        }

    def _write_client_configs(self) -> None:
        tls = {"librdkafka": {"ssl.ca.location": str(self.ca_file)},
               "java": {"ssl.truststore.type": "PEM",
                        "ssl.truststore.location": str(self.ca_file)}}
        sasl = {"librdkafka": {"sasl.mechanism": "PLAIN", "sasl.username": SASL_USER,
                               "sasl.password": self.sasl_password},
                "java": {"sasl.mechanism": "PLAIN", "sasl.jaas.config":
                         "org.apache.kafka.common.security.plain.PlainLoginModule"
                         f' required username="{SASL_USER}" password="{self.sasl_password}";'}}
        for dialect in ("librdkafka", "java"):
            for listener, parts in (("SASL_PLAINTEXT", [sasl]), ("SSL", [tls]),
                                    ("SASL_SSL", [sasl, tls])):
                values = {"security.protocol": listener}
                for part in parts:
                    values.update(part[dialect])
                _write_private(self.client_config(listener, dialect), _properties(values))


def serve(brokers: int, broker_config: dict[str, str]) -> int:
    """Run a real cluster in the foreground until SIGINT/SIGTERM; print how to reach it."""
    import sys

    stop = []
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.append(True))
    started = time.monotonic()
    cluster = KafkaCluster(brokers, broker_config)
    try:
        cluster.prepare()
        print(f"kmon devcluster: starting {brokers} Apache Kafka {maven_jars.KAFKA_VERSION} "
              "node(s)...", file=sys.stderr, flush=True)
        cluster.start()
        for line in describe(cluster):
            print(line, flush=True)
        print(f"kmon devcluster: Apache Kafka ready in {time.monotonic() - started:.1f}s "
              "(Ctrl-C to stop)", file=sys.stderr, flush=True)
        while not stop:
            for node in cluster.nodes:
                if (code := node.exit_code()) is not None:
                    print(f"kmon devcluster: node {node.node_id} exited "
                          f"({code}): {_log_tail(node)}", file=sys.stderr)
                    return 1
            time.sleep(0.5)
        return 0
    finally:
        cluster.stop()


def describe(cluster: KafkaCluster) -> list[str]:
    """The bootstrap string, then one line per secured listener with what a client needs."""
    sasl = f"sasl.mechanism=PLAIN sasl.username={SASL_USER}"
    tls = f"ssl.ca.location={cluster.ca_file}"
    needs = {"SASL_PLAINTEXT": sasl, "SSL": tls, "SASL_SSL": f"{sasl} {tls}"}
    return [cluster.bootstrap()] + [
        f"{name} {cluster.bootstrap(name)} {what} config={cluster.client_config(name)} "
        f"java-config={cluster.client_config(name, 'java')}" for name, what in needs.items()]


def _java() -> str:
    """The JDK's ``java`` (see ``trusted_program``: as root, one only root can change)."""
    java = trusted_program("java", home="JAVA_HOME")
    if java is None:
        raise ClusterError("a real Kafka cluster needs Java 17 or newer: install a JDK "
                           "(apt-get install openjdk-17-jdk-headless)")
    version = subprocess.run([java, "-version"], capture_output=True, text=True,
                             env=jvm_environment(java))
    match = re.search(r'version "(\d+)', version.stderr)
    if not match or int(match.group(1)) < 17:
        raise ClusterError(f"Apache Kafka {maven_jars.KAFKA_VERSION} needs Java 17 or newer; "
                           f"{java} is {match.group(1) if match else 'of unknown version'}")
    return java


def _archive_path(java: str, jars: list[Path]) -> Path | None:
    """Where the class-data archive of this JDK and these jars lives (None: no private
    cache directory)."""
    identity = [os.path.realpath(java)]
    for path in [Path(os.path.realpath(java)), *jars]:
        info = path.stat()
        identity.append(f"{path}:{info.st_size}:{info.st_mtime_ns}")
    digest = hashlib.sha1("\0".join(identity).encode()).hexdigest()[:12]
    try:
        return private_cache_dir("kafka") / f"kafka-{maven_jars.KAFKA_VERSION}-{digest}.jsa"
    except UnsafeFile:
        return None


def _archive_options(archive: Path | None) -> tuple[str, Path | None]:
    """The JVM option that maps ``archive`` (a no-op option when there is none to map),
    and the file a first format is to write it to (None: it exists, or has no place)."""
    if archive is None:
        return "-Xshare:auto", None
    if archive.exists() or archive.is_symlink():
        return (f"-XX:SharedArchiveFile={archive}" if private_file(archive)
                else "-Xshare:auto"), None
    return "-Xshare:auto", archive.with_name(f"{archive.name}.{os.getpid()}.tmp")


def _cluster_id() -> str:
    """A random cluster id as Kafka writes them (base64url of a UUID), never starting with
    '-' (the storage tool would read it as an option, as Kafka's own Uuid avoids too)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _private_dir() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="kmon-kafka-")  # mode 0700


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _key_pair(java: str, workdir: Path, password: str) -> None:
    """The brokers' TLS key pair in ``workdir``: made with keytool by a process's first
    cluster, copied for its later ones (keytool is two JVM starts; the clusters are
    throwaway ones on loopback)."""
    made = _KEY_PAIRS.get(java)
    if made is None or made[0] != password:
        _make_key_pair(java, workdir, password)
        _KEY_PAIRS[java] = (password, (workdir / "broker.p12").read_bytes(),
                            (workdir / "ca.pem").read_bytes())
        return
    _write_private(workdir / "broker.p12", made[1])
    (workdir / "ca.pem").write_bytes(made[2])


def _make_key_pair(java: str, workdir: Path, password: str) -> None:
    """The brokers' TLS key pair (``broker.p12``) and its certificate as the CA (``ca.pem``)."""
    keytool = trusted_program("keytool", {"PATH": str(Path(java).resolve().parent)})
    if keytool is None:
        raise ClusterError(f"no keytool beside {java}: a JDK (not a JRE) is needed")
    store = ["-keystore", str(workdir / "broker.p12"), "-storetype", "PKCS12",
             "-storepass", password]
    for argv in (["-genkeypair", "-alias", "kmon", "-keyalg", "RSA", "-keysize", "2048",
                  "-validity", "30", "-dname", "CN=127.0.0.1", "-ext", "SAN=ip:127.0.0.1",
                  "-keypass", password, *store],
                 ["-exportcert", "-rfc", "-alias", "kmon", "-file", str(workdir / "ca.pem"),
                  *store]):
        result = subprocess.run([keytool, *QUICK_JVM, *argv], capture_output=True, text=True,
                                env=jvm_environment(java))
        if result.returncode != 0:
            raise ClusterError(f"keytool could not make the TLS key pair: "
                               f"{(result.stderr or result.stdout).strip()[:300]}")


def _write_node_files(node: KafkaNode, config: dict[str, str]) -> None:
    node.directory.mkdir(mode=0o700)
    _write_private(node.directory / "server.properties", _properties(config))
    (node.directory / "log4j2.properties").write_text(
        "status = error\n"
        "appender.file.type = File\nappender.file.name = file\n"
        f"appender.file.fileName = {node.directory / 'server.log'}\n"
        "appender.file.layout.type = PatternLayout\n"
        "appender.file.layout.pattern = [%d] %p %m (%c)%n\n"
        "rootLogger.level = INFO\nrootLogger.appenderRef.file.ref = file\n")


def _format(java: str, classpath: str, node: KafkaNode, cluster_id: str,
            archive: tuple[str, ...]) -> None:
    """Format the node's storage (``archive``: the JVM's class-data archive options)."""
    result = subprocess.run(
        [java, "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *archive,
         "-cp", classpath,
         f"-Dlog4j2.configurationFile={node.directory / 'log4j2.properties'}",
         "kafka.tools.StorageTool", "format", "-t", cluster_id,
         "-c", str(node.directory / "server.properties")],
        capture_output=True, text=True, env=jvm_environment(java), stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise ClusterError(f"formatting node {node.node_id}'s storage failed: "
                           f"{(result.stderr or result.stdout).strip()[-300:]}")


def _properties(values: dict[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in values.items())


def _write_private(path: Path, text: str | bytes) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "wb" if isinstance(text, bytes) else "w") as out:
        out.write(text)


def _log_tail(node: KafkaNode) -> str:
    lines: list[str] = []
    for name in ("jvm.out", "server.log"):
        with contextlib.suppress(OSError):
            lines += (node.directory / name).read_text(errors="replace").splitlines()
    errors = [line for line in lines if "ERROR" in line or "Exception" in line]
    return ((errors or lines or ["no log"])[-1])[:300]

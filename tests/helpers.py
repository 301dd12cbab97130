"""The helpers kmon's tests share (the one module they import them from; fixtures live in
conftest.py): client processes and their output, the kmon command line, streams of
``kmon attach --json``, recordings, the wire's rows, waits on a condition with a hang guard."""

from __future__ import annotations

import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pyarrow.parquet as pq
import pytest

from kmon.dashboard_settings import DashboardSettings
from kmon.engine.cluster_watch import ClusterWatcher
from kmon.engine.facade import AttachFailed, ClusterSession, ClusterView, ProcessSession
from kmon.engine.host_view import cluster_labels
from kmon.engine.monitor import Monitor
from kmon.engine.replay import Replay, read_recording
from kmon.engine.sampler import ProcessSampler, SamplerSettings
from kmon.evidence.java_log_nodes import NodeTable
from kmon.model import Event, Role, Snapshot
from kmon.sources.cluster import BrokerInfo
from kmon.sources.java_log import LogFollower
from kmon.sources.socket_readers import open_socket_reader
from kmon.sources.sockets import Endpoint
from kmon.widgets.app import KmonApp
from kmon.widgets.attach_screen import AttachScreen
from kmon.widgets.connection_table import ConnectionTable
from kmon.widgets.event_log import EventLog
from kmon.widgets.help import HelpScreen
from kmon.widgets.list_screen import ProcessListScreen
from kmon.widgets.watch_screen import WatchScreen

TESTS = Path(__file__).parent
REPO = TESTS.parent
JAVA_VERSIONS = ("4.4.0", "3.9.1")  # the kafka-clients releases tested (conftest's JAVA_CLIENTS)
T = TypeVar("T")


def wait_for(condition: Callable[[], T], what: str, seconds: float = 60,
             every: float = 0.05) -> T:
    """``condition()``'s first truthy value, asked every ``every`` s; fails the test naming
    ``what`` after ``seconds`` (a hang guard, not a pace)."""
    deadline = time.monotonic() + seconds
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"never within {seconds:g} s: {what}")
        time.sleep(every)


def unique(prefix: str) -> str:
    """A name no other test (or run) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class Child:
    """A subprocess whose stdout lines are read in the background."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env, bufsize=1)
        self.lines: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        self._pumps = [threading.Thread(target=self._pump, args=(stream, sink), daemon=True)
                       for stream, sink in ((self.proc.stdout, self.lines.put),
                                            (self.proc.stderr, self.stderr.append))]
        for pump in self._pumps:
            pump.start()

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

    def wait_exit(self, timeout: float = 60.0) -> int:
        """The exit code, once the process has exited and every line it wrote (stderr
        included) has been read."""
        code = self.proc.wait(timeout)
        for pump in self._pumps:
            pump.join(timeout)
        return code

    def wait_stderr(self, text: str, timeout: float = 40.0) -> str:
        """The first stderr line containing ``text`` (the process may still run)."""
        return wait_for(lambda: next((line for line in self.stderr if text in line), None),
                        f"{text!r} on the stderr of {self.proc.args}", timeout)

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


def kmon(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run the real kmon command line."""
    return subprocess.run([sys.executable, "-m", "kmon", *args], capture_output=True,
                          text=True, timeout=timeout)


def attach_once(pid: int, *extra: str) -> dict:
    """``kmon attach PID --once --json``, parsed; fails the test on a non-zero exit. One look
    (``--settle 0``) unless ``extra`` asks to settle: test_trust checks the settled view."""
    settle = () if "--settle" in extra else ("--settle", "0")
    result = kmon("attach", str(pid), "--once", "--json", *settle, *extra)
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


def require_java() -> None:
    if shutil.which("java") is None:
        pytest.skip("java (a JDK 17+) is not installed: a real Kafka cluster needs it")


def debug_log_options(log: Path) -> list[str]:
    """slf4j-simple's system properties for a DEBUG log with ISO times in ``log``."""
    prefix = "-Dorg.slf4j.simpleLogger."
    return [f"{prefix}logFile={log}", f"{prefix}defaultLogLevel=debug",
            f"{prefix}showDateTime=true", f"{prefix}dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSSXXX"]


# --- client programs and the streams kmon makes of them ------------------------------

KAFKA_PYTHON_CONSUMER = """
import sys
from kafka import KafkaConsumer
consumer = KafkaConsumer(sys.argv[3], bootstrap_servers=sys.argv[1].split(","),
                         group_id=sys.argv[2], client_id="kmon-kafka-python",
                         api_version=(2, 0, 0))
print("READY", flush=True)
for _ in consumer:
    pass
"""


PER_MESSAGE = """
import sys, time
from confluent_kafka import Producer
while True:
    producer = Producer({"bootstrap.servers": sys.argv[1]})
    producer.produce("kmon-churn", b"one message, one client")
    producer.flush(5)
    del producer
    print("SENT", flush=True)
    time.sleep(0.2)
"""


def request_to(server: socket.socket, client_id: str):
    """(a client socket connected to ``server`` that sent one Metadata request, as a
    TcpSocket, the server's end)."""
    from kmon.sources import kafka_protocol as kp
    from kmon.sources.sockets import Endpoint, TcpSocket

    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    client.sendall(kp.metadata_request(1, client_id))
    sock = TcpSocket(0, client.fileno(), Endpoint(*client.getsockname()),
                     Endpoint(*server.getsockname()), "ESTABLISHED")
    return client, sock, peer


def produce(cluster: str, topic: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster})
    for i in range(20):
        producer.produce(topic, f"m{i}".encode())
    producer.flush(10)


def rows_until(stream: Child, wanted, seconds: float = 60) -> list[dict]:
    """The connections a ``kmon attach --json`` stream shows at the first poll where
    ``wanted(rows)`` holds; fails with the last rows after ``seconds`` (a hang guard)."""
    rows: list[dict] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        (process,) = json.loads(stream.wait_line("{", timeout=seconds))["processes"]
        rows = process["connections"]
        if rows and wanted(rows):
            return rows
    shown = [(r["role"], r["node_id"], r["broker_id"], r["remote"], r["idle_ms"],
              r["evidence"].get("role"), r["evidence"].get("wire")) for r in rows]
    raise AssertionError(f"the wire never named every socket: {shown}")


def from_start(argv: list[str], wanted, env: dict | None = None) -> tuple[Child, list[dict]]:
    """A client attached before it opens a connection (a shell that execs it when told: the
    same PID): the wire sees every connection from its first request. (client, its rows)"""
    client = Child(["sh", "-c", 'read go; exec "$@"', "sh", *argv], env=env)
    stream = attach_stream(client.pid, "--any-process", interval="500ms")
    try:
        stream.wait_line("{")  # the tap is open
        client.send("go")
        return client, rows_until(stream, wanted)
    except BaseException:
        client.stop()
        raise
    finally:
        stream.stop()


def apis(row: dict) -> set[str]:
    """The API names the wire saw on a row's socket."""
    return {part.split("×")[0] for part in row["evidence"].get("wire", "").split()}


def wire_sure(row: dict) -> bool:
    """The wire's confidence in a row: 1.0, but 0.7 for a connection that only asked for
    metadata once the cluster was known (a broker, or a re-bootstrap)."""
    from kmon.evidence.wire import AFTER_LEARNED

    metadata_only = row["role"] == "broker" and apis(row) <= {"Metadata", "ApiVersions"}
    return row["confidence"] == (AFTER_LEARNED if metadata_only else 1.0)


def all_named(rows: list[dict]) -> bool:
    """Every socket named by the wire with its broker, a coordinator among them, and a
    broker socket that fetched."""
    kafka = [r for r in rows if r["evidence"].get("role") == "wire"]
    return bool(kafka) and len(kafka) == len(rows) and all(
        r["broker_id"] is not None for r in kafka) and any(
        r["role"] == "coordinator" for r in kafka) and any(
        r["role"] == "broker" and "Fetch" in apis(r) for r in kafka)


def captured(capture, wanted, seconds: float = 10) -> list:
    """The segments a ``PacketCapture`` reads until ``wanted(segments)`` holds (the packet
    ring hands a block over when it fills or times out)."""
    segments: list = []

    def enough() -> bool:
        segments.extend(capture.read())
        return wanted(segments)

    wait_for(enough, "the segments wanted from the packet ring", seconds)
    return segments


IDLE_REASONS = {"client_idle_reap", "broker_idle_reap", "middlebox_idle_drop"}


def attach_stream(pid: int, *extra: str, interval: str = "250ms") -> Child:
    """``kmon attach PID --json`` every ``interval``."""
    return Child([sys.executable, "-m", "kmon", "attach", str(pid), "--json", "--interval",
                  interval, *extra])


def closed_events(stream: Child, wanted: int = 1, seconds: float = 30) -> list[dict]:
    """The closed events of a streamed ``kmon attach --json`` until ``wanted`` arrived."""
    deadline, found = time.monotonic() + seconds, []
    while len(found) < wanted and time.monotonic() < deadline:
        record = json.loads(stream.wait_line("{", timeout=seconds))
        found += [e for e in record["events"] if e["kind"] == "closed"]
    return found


def read_until(stream: Child, done, seconds: float) -> tuple[list[dict], dict]:
    """Every event of the stream until ``done(events, record)`` or ``seconds`` after its first
    record; and the last record."""
    record = json.loads(stream.wait_line("{", timeout=60))
    deadline, events = time.monotonic() + seconds, record["events"]
    while time.monotonic() < deadline and not done(events, record):
        record = json.loads(stream.wait_line("{", timeout=30))
        events += record["events"]
    return events, record


# --- recordings and logs ------------------------------------------------------------

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


def record_child(*args: str) -> Child:
    """``kmon record`` in the background; returns once it has said it started."""
    child = Child([sys.executable, "-m", "kmon", "record", *args])
    child.wait_stderr("session", timeout=30)
    return child


def log_table(log: Path) -> NodeTable:
    """A Java client's log file, read from its start and folded into its node table."""
    table = NodeTable()
    for event in LogFollower(log, from_start=True).poll():
        table.apply(event)
    return table


class GatedMonitor:
    """A real Monitor whose poll waits for ``gate`` and which logs when it polled and closed.

    A fake only of timing: it holds a real poll open while the test closes the session,
    which a real poll (a few milliseconds) cannot be made to be on demand.
    """

    def __init__(self, monitor) -> None:
        self.monitor = monitor
        self.gate, self.entered = threading.Event(), threading.Event()
        self.log: list[str] = []

    def __getattr__(self, name: str):
        return getattr(self.monitor, name)

    def poll(self):
        self.entered.set()
        self.gate.wait(60)
        result = self.monitor.poll()
        self.log.append("polled")
        return result

    def close(self) -> None:
        self.log.append("closed")
        self.monitor.close()


# kmon serve: the agent itself, a real Prometheus server, promtool

def require_prometheus() -> None:
    if shutil.which("prometheus") is None or shutil.which("promtool") is None:
        pytest.skip("prometheus and promtool are not installed (Debian: apt-get install "
                    "prometheus)")


def get(url: str, accept: str | None = None) -> tuple[int, str, str]:
    """(status, content type, body) of a GET on loopback."""
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read().decode()
    except TimeoutError as err:
        raise AssertionError(f"no answer from {url} within 60s") from err


def start_serve(*args: str) -> tuple[Child, str]:
    """``kmon serve --listen 127.0.0.1:0 ARGS`` and the address it listens on."""
    child = Child([sys.executable, "-m", "kmon", "serve", "--listen", "127.0.0.1:0", *args])
    line = wait_for(lambda: next((line for line in child.stderr if "/metrics" in line), None)
                    or (child.proc.poll() is not None and
                        pytest.fail(f"kmon serve did not start: {child.stderr}")),
                    "kmon serve listening")
    return child, line.split("http://", 1)[1].split("/metrics", 1)[0]


def cluster_id(bootstrap: str) -> str:
    """The cluster's id, as a real client's Metadata answer gives it (not kmon's query)."""
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).cluster_id


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Prometheus:
    """A real Prometheus server on loopback scraping ``target`` every second."""

    def __init__(self, target: str, workdir: Path) -> None:
        config = workdir / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                          "scrape_configs:\n  - job_name: kmon\n    static_configs:\n"
                          f"      - targets: ['{target}']\n")
        self.address = f"127.0.0.1:{free_port()}"
        self.child = Child(["prometheus", f"--config.file={config}",
                            f"--storage.tsdb.path={workdir / 'data'}",
                            f"--web.listen-address={self.address}"])
        wait_for(self._ready, "prometheus ready")

    def _ready(self) -> bool:
        try:
            return get(f"http://{self.address}/-/ready")[0] == 200
        except OSError:
            return False

    def query(self, expr: str) -> list[dict]:
        """The instant vector ``expr`` evaluates to now."""
        url = f"http://{self.address}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        answer = json.loads(get(url)[2])
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def stop(self) -> None:
        self.child.stop()


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], input=stdin, capture_output=True, text=True,
                          timeout=120)


# the dashboards: real Textual apps over real sessions


def watch_app(bootstrap: str, pids: list[int] | None = None, labels=None,
              discover_every_s: float = 5.0,
              record_dir: Path = Path("kmon-sessions")) -> tuple[KmonApp, WatchScreen]:
    watcher = ClusterWatcher(bootstrap, {}, timeout_s=2.0, refresh_s=10.0)
    session = ClusterSession(watcher, SamplerSettings(require_kafka=False), pids or [],
                             discover_every_s=discover_every_s)
    screen = WatchScreen("test", session,
                         DashboardSettings(interval_s=0.5, record_dir=record_dir), labels)
    return KmonApp(screen), screen


def cells(screen: WatchScreen, table_id: str) -> list[list[str]]:
    table = screen.query_one(f"#{table_id}")
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def help_rows(screen) -> list[str]:
    """What the help of ``screen`` should say: its bindings' words, then the app's quit
    unless the screen binds q itself."""
    own = [b.tooltip for b in screen.BINDINGS
           if screen.check_action(b.action, ()) is not False]
    return own + ([] if any("q" in b.key.split(",") for b in screen.BINDINGS
                            if screen.check_action(b.action, ()) is not False) else ["quit"])


async def the_list_keys_work(pilot, screen, ours) -> None:
    """help, sort, filter, clear, hide idle and record on a screen listing processes; the
    test's own processes (``ours``) are among those recorded (others on this host may come
    and go meanwhile)."""
    app = screen.app
    await pilot.press("question_mark")
    await until(pilot, lambda: isinstance(app.screen, HelpScreen), "the help")
    assert [what for _, what in app.screen.rows] == help_rows(screen)
    await pilot.press("escape")
    await until(pilot, lambda: app.screen is screen, "the list again")
    table = screen.query_one("#processes")
    await pilot.press("s")
    assert "sort: max idle" in str(table.border_title)
    wanted = str(max(ours))  # a process of the test's own: others may exit meanwhile

    def filtered() -> bool:  # a bare word matches anywhere in a row: in others' too
        shown = [r for r in cells(screen, "processes") if r[0]]  # headings have no pid
        return (wanted in [r[0] for r in shown]
                and all(any(wanted in str(cell) for cell in r) for r in shown))

    await pilot.press("f", *wanted, "enter")
    await until(pilot, filtered, "only the processes the filter matches")
    await pilot.press("c", "i")
    assert "idle hidden" in str(table.border_title)
    await pilot.press("i", "s", "s", "s")  # back to every process by pid
    await until(pilot, lambda: len(cells(screen, "processes")) > 1, "every process again")
    await pilot.press("r")
    assert screen.recorder == screen.record_dir
    started = screen.snapshot.ts_ms
    await until(pilot, lambda: screen.snapshot.ts_ms > started, "a recorded refresh")
    await pilot.press("r")
    await app.workers.wait_for_complete()  # the recording closed (in a worker)
    recorded = {row["pid"] for row in pq.read_table(screen.record_dir / "snapshots",
                                                    columns=["pid"]).to_pylist()}
    assert set(ours) <= recorded


def process_session(pid: int) -> ProcessSession:
    return ProcessSession(Monitor([ProcessSampler(pid, open_socket_reader(), SamplerSettings())]))


def attach_app(pid: int, interval_s: float = 0.25, **settings) -> tuple[KmonApp, AttachScreen]:
    screen = AttachScreen(pid, process_session(pid),
                          DashboardSettings(interval_s=interval_s, **settings))
    return KmonApp(screen), screen


async def attach_to(pilot, screen, pid: int) -> AttachScreen:
    """``pid``'s attach screen, opened from a list screen: its row picked and attached in one
    step, as rows move between a cursor move and a key on a busy host."""
    table = screen.query_one("#processes")
    table.move_cursor(row=[r[0] for r in cells(screen, "processes")].index(str(pid)))
    screen.action_attach()
    await until(pilot, lambda: isinstance(screen.app.screen, AttachScreen), "attach")
    assert screen.app.screen.pid == pid
    return screen.app.screen


async def until(pilot, condition, what: str, polls: int = 400) -> None:
    """Let the app run until ``condition()`` holds (fails after ``polls`` short pauses)."""
    for _ in range(polls):
        if condition():
            return
        await pilot.pause(0.05)
    raise AssertionError(f"the dashboard never showed {what}")


def table_rows(screen: AttachScreen) -> list[list[str]]:
    table = screen.query_one(ConnectionTable)
    return [table.row_text(i) for i in range(table.row_count)]


def packet_sockets_held(pid: int | str = "self") -> int:
    """The packet sockets a process holds, from /proc (its fds against /proc/net/packet)."""
    lines = Path("/proc/net/packet").read_text().splitlines()[1:]
    packet_inodes = {line.split()[-1] for line in lines}
    held = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            held.add(target[len("socket:["):-1])
        # another thread's fd may come and go meanwhile: skipped
    return len(held & packet_inodes)


# -- dashboards from recordings (tests/data/*.jsonl, kmon.engine.replay) ----------------------

DATA = TESTS / "data"


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    """Clock times on screen in UTC, whatever the machine's zone."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def replayed(name: str) -> tuple[KmonApp, AttachScreen, Replay]:
    replay = Replay(read_recording(DATA / name))
    pid = next(iter(replay.recording.pids))
    # An hour between refreshes: only the first comes from the timer; the test plays the rest.
    screen = AttachScreen(pid, ProcessSession(replay), DashboardSettings(interval_s=3600))
    return KmonApp(screen), screen, replay


def play_all(screen: AttachScreen, replay: Replay):
    async def run_before(pilot) -> None:
        # the first refresh, from the screen's own worker
        await until(pilot, lambda: screen.history.ticks, "the first refresh")
        while not replay.finished:
            screen.apply(*replay.poll())
        await pilot.pause()
        # the log follows its newest line after a refresh; settle it so the picture is stable
        for log in screen.query(EventLog):
            log.scroll_end(animate=False, immediate=True)
        await pilot.pause()
    return run_before


class ReplayedClients:
    """Both recordings played as one host's clients, for the watch and host screens: each
    poll is a frame of each (recorded a few ms apart). The recordings hold no cluster
    metadata: the watch screen's brokers are the ones the recorded clients name."""

    host = "replay"
    notices: list[str] = []
    next_retry_in_s = None

    def __init__(self) -> None:
        self.replays = [Replay(read_recording(DATA / n))
                        for n in ("consumer.jsonl", "idle-producer.jsonl")]
        first = self.replays[0].recording.frame(0)[0]
        brokers = {(c.broker_id, c.remote) for p in first.processes for c in p.connections
                   if c.role in (Role.BROKER, Role.COORDINATOR)}
        self.view = ClusterView(
            "127.0.0.1:38773", tuple(BrokerInfo(b, *r.rsplit(":", 1)) for b, r in sorted(brokers)),
            fetched_at=first.ts_ms)

    @property
    def finished(self) -> bool:
        return all(r.finished for r in self.replays)

    def cluster_labels(self, snapshot: Snapshot) -> dict[int, str]:
        """As kmon's own query to each recorded broker would have answered: its list (the
        recordings keep no cluster id)."""
        answer = tuple(sorted(f"{b.host}:{b.port}" for b in self.view.brokers))
        return cluster_labels(snapshot, {Endpoint(b.host, int(b.port)): (None, answer)
                                         for b in self.view.brokers})

    def poll(self) -> tuple[Snapshot, list[Event]]:
        frames = [r.poll() for r in self.replays]
        events = sorted((e for _, es in frames for e in es), key=lambda e: e.ts_ms)
        return Snapshot(frames[0][0].ts_ms, self.host,
                        [p for snapshot, _ in frames for p in snapshot.processes]), events

    def cluster_due(self) -> bool:
        return False

    def events_of(self, pid: int) -> list[Event]:
        return []

    def attach(self, pid: int) -> ProcessSession:
        raise AttachFailed("a replay")

    def close(self) -> None:
        pass


def play_listed(screen: ProcessListScreen, session: ReplayedClients):
    async def run_before(pilot) -> None:
        await until(pilot, lambda: screen.snapshot is not None, "the first refresh")
        while not session.finished:
            screen.apply(*session.poll())
        await pilot.pause()
        screen.query_one(EventLog).scroll_end(animate=False, immediate=True)
        await pilot.pause()
    return run_before

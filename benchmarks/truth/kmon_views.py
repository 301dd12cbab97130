"""kmon's side: the live stream (``kmon attach PID -b BOOT --json``), the one-shot views
(``--once --json``, ``kmon ps -o json``) taken beside it, ``kmon serve``'s /metrics and
``kmon record``'s Parquet over the whole scenario."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from kmon.devtools.children import stop_all

INTERVAL = "500ms"
NOT_LISTED = "the process is not listed"
CATCH_UP_S = 20.0  # a loaded host's stream may print its snapshots seconds late


def kmon(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kmon", *args], capture_output=True,
                          text=True, timeout=timeout)


@dataclass
class Stream:
    """``kmon attach PID -b BOOT --json``, every record kept as it arrives."""

    pid: int
    bootstrap: str | None  # kmon's -b (None: kmon asks no broker)
    records: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    proc: subprocess.Popen | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> Stream:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kmon", "attach", str(self.pid), *cluster(self.bootstrap),
             "--json", "--interval", INTERVAL], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=lambda: self.errors.extend(self.proc.stderr),
                         daemon=True).start()
        deadline = time.monotonic() + 60
        while not self.records:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"kmon attach gave no snapshot: {self.errors[-3:]}")
            time.sleep(0.1)
        return self

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("{"):
                with self.lock:
                    self.records.append(json.loads(line))

    def stop(self) -> None:
        stop_all([self.proc], 10)

    @property
    def started_ms(self) -> int:
        return self.records[0]["ts_ms"]

    def rows(self, record: dict) -> list[dict]:
        return [c for p in record["processes"] if p["pid"] == self.pid
                for c in p["connections"]]

    def latest(self) -> dict:
        with self.lock:
            return self.records[-1]

    def mark(self) -> int:
        """Where the stream is now (for ``since``)."""
        with self.lock:
            return len(self.records) - 1

    def since(self, mark: int, through_ms: float | None = None) -> list[list[dict]]:
        """The process's rows in every snapshot from ``mark`` on: what a one-shot view
        that ran meanwhile may have seen at its moment. ``through_ms``: when the view
        answered (its moment is before); the snapshots run on to the first poll made then or
        later, so that they hold its moment between them (a snapshot is printed a poll's
        work after its time: the last one printed may be older than the view's moment)."""
        deadline = time.monotonic() + CATCH_UP_S
        while (through_ms is not None and self.latest()["ts_ms"] < through_ms
               and time.monotonic() < deadline
               and (self.proc is None or self.proc.poll() is None)):
            time.sleep(0.1)
        with self.lock:
            records = self.records[mark:]
        return [self.rows(record) for record in records]

    def between(self, mark: int) -> list[str]:
        """The roles at their close of the process's sockets closed from ``mark`` on that no
        snapshot from there showed: a view polled at another moment may have seen them."""
        with self.lock:
            records = self.records[mark:]
        shown = {row["key"] for record in records for row in self.rows(record)}
        return [e.get("role") or "unknown" for record in records for e in record["events"]
                if e["kind"] == "closed" and e["pid"] == self.pid and e["key"] not in shown]

    def closes(self) -> list[dict]:
        """Every ``closed`` event of the process, with its local and remote ports (a polled
        socket's local endpoint from the rows that showed it)."""
        local_of: dict[str, str] = {}
        found = []
        with self.lock:
            records = list(self.records)
        for record in records:
            for row in self.rows(record):
                local_of[row["key"]] = row["local"]
            found += with_ports([e for e in record["events"] if e["kind"] == "closed"
                                 and e["pid"] == self.pid], local_of)
        return found

    def history(self) -> dict[str, list[tuple[int, dict]]]:
        """Each socket's rows by the time of the snapshot that showed them."""
        found: dict[str, list[tuple[int, dict]]] = {}
        with self.lock:
            records = list(self.records)
        for record in records:
            for row in self.rows(record):
                found.setdefault(row["key"], []).append((record["ts_ms"], row))
        return found

    def last_rows(self) -> dict[tuple[int, int], dict]:
        """Each socket the stream showed, at the last snapshot that showed it, by ports."""
        last: dict[tuple[int, int], dict] = {}
        with self.lock:
            records = list(self.records)
        for record in records:
            for row in self.rows(record):
                last[(port(row["local"]), port(row["remote"]))] = row
        return last


def with_ports(closes: list[dict], local_of: dict[str, str]) -> list[dict]:
    """Each close with its (local, remote) ports: a polled socket's local endpoint from the
    rows that showed it (``local_of``, by key), one no poll saw from its kernel key."""
    found = []
    for event in closes:
        local = event.get("local") or local_of.get(event["key"])
        if local is None and event["key"].startswith("kernel:"):
            local = event["key"][len("kernel:"):].split(">")[0]
        found.append({**event, "ports": (port(local), port(event.get("remote")))})
    return found


def port(endpoint: str | None) -> int | None:
    if not endpoint or endpoint == "None":
        return None
    tail = endpoint.rpartition(":")[2]
    return int(tail) if tail.isdigit() else None


def cluster(bootstrap: str | None) -> list[str]:
    return ["-b", bootstrap] if bootstrap else []


def once(pid: int, bootstrap: str | None) -> list[dict] | str:
    """``kmon attach PID -b BOOT --once --json``'s rows, or why there are none."""
    result = kmon("attach", str(pid), *cluster(bootstrap), "--once", "--json")
    if result.returncode != 0:
        return f"exit {result.returncode}: {result.stderr.strip()[-200:]}"
    return [c for p in json.loads(result.stdout)["processes"] if p["pid"] == pid
            for c in p["connections"]]


def ps(pid: int, bootstrap: str | None) -> dict | str:
    """``kmon ps -b BOOT -o json``'s line of the process, or why there is none."""
    result = kmon("ps", *cluster(bootstrap), "-o", "json")
    if result.returncode != 0:
        return f"exit {result.returncode}: {result.stderr.strip()[-200:]}"
    rows = [p for p in json.loads(result.stdout)["processes"] if p["pid"] == pid]
    return rows[0] if rows else NOT_LISTED


class Serve:
    """``kmon serve`` on a free loopback port, polling every second: its /metrics' open
    connections of one process, by role."""

    def __init__(self, bootstrap: str | None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kmon", "serve", "--listen", "127.0.0.1:0", "--interval",
             "1s", *cluster(bootstrap)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True)
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(self.proc.stderr),
                         daemon=True).start()
        self.address = None

    def roles(self, pid: int, seconds: float = 20) -> Counter | str:
        """The process's connections by role in /metrics, from a poll made after this call
        (the streams it is held to are marked just before: a scrape serves the last poll,
        which a loaded machine may have made seconds earlier; empty when its polls do not list
        the process), or why there are none."""
        deadline, asked = time.monotonic() + seconds, time.time()
        polled = False  # a poll made after the call, which did not list the process
        while time.monotonic() < deadline and self.proc.poll() is None:
            if self.address is None:
                found = [line for line in self.lines if "/metrics" in line and "http://" in line]
                if found:
                    self.address = found[0].split("http://", 1)[1].split("/metrics", 1)[0]
            if self.address is not None:
                text = self.scrape()
                counts, fresh = connection_roles(text, pid), last_poll_s(text) >= asked
                if counts is not None and fresh:
                    return counts
                polled = polled or fresh
            time.sleep(0.5)
        if polled:  # serve does not count the process as a client of its cluster: none
            return Counter()
        return f"no series of the process in /metrics: {''.join(self.lines[-2:]).strip()}"

    def last_scrape(self) -> str | None:
        """/metrics once more, at the end of the watch; None where serve does not answer."""
        if self.address is None:
            return None
        try:
            return self.scrape()
        except OSError:
            return None

    def scrape(self) -> str:
        with urllib.request.urlopen(f"http://{self.address}/metrics", timeout=30) as answer:
            return answer.read().decode()

    def stop(self) -> None:
        stop_all([self.proc], 15)


LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def command_of(pid: int) -> str:
    """``pid``'s command as kmon serve labels it (``process``); "" once it has gone."""
    import psutil

    from kmon.short_command import short_command
    from kmon.sources.processes.process_info import describe

    try:
        name, cmdline, _ = describe(psutil.Process(pid))
    except psutil.Error:
        return ""
    return short_command(cmdline, name) or name


def last_poll_s(text: str) -> float:
    """``kmon_last_poll_timestamp_seconds`` of a scrape (0 when absent)."""
    for line in text.splitlines():
        if line.startswith("kmon_last_poll_timestamp_seconds"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def connection_roles(text: str, pid: int) -> Counter | None:
    """``kmon_connections`` of ``pid``'s command summed by role: serve labels a process by
    its command, never its pid, and adds up the processes of one command (a scenario's
    check sums their streams: ``score.summed_disagreements``). None while serve does not
    list the command (``kmon_client_processes``); empty when it holds no connection."""
    process = command_of(pid)
    counts: Counter = Counter()
    listed = False
    for line in text.splitlines():
        if line.startswith(("kmon_connections{", "kmon_client_processes{")):
            labels = dict(LABEL.findall(line.split("}", 1)[0]))
            if labels.get("process") != process:
                continue
            listed = True
            if line.startswith("kmon_connections{"):
                counts[labels.get("role", "")] += round(float(line.rsplit(" ", 1)[1]))
    return counts if listed else None


def connection_closes(text: str, process: str) -> Counter:
    """``kmon_connections_closed_total`` of the command ``process`` (as serve labels it:
    ``command_of``, read while the process lived), summed by "closed_by/reason"."""
    counts: Counter = Counter()
    for line in text.splitlines():
        if line.startswith("kmon_connections_closed_total{"):
            labels = dict(LABEL.findall(line.split("}", 1)[0]))
            if labels.get("process") == process:
                kind = f"{labels.get('closed_by')}/{labels.get('reason')}"
                counts[kind] += round(float(line.rsplit(" ", 1)[1]))
    return counts


class Recording:
    """``kmon record -b BOOT --out DIR`` (the cluster's local clients; without a cluster,
    ``--pid PID...``) over a whole scenario; its Parquet tables read back once it has
    stopped (SIGTERM: it writes what it holds)."""

    def __init__(self, pids: list[int], bootstrap: str | None, out: Path) -> None:
        self.out = out
        which = cluster(bootstrap) or [a for p in pids for a in ("--pid", str(p))]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kmon", "record", *which, "--out", str(out),
             "--interval", INTERVAL],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def stop(self) -> str | None:
        """Stop it; why it failed, if it did."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            _, err = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            stop_all([self.proc], 5)
            return "kmon record did not stop within 30 s"
        return None if self.proc.returncode == 0 else (
            f"exit {self.proc.returncode}: {err.strip()[-200:]}")

    def rows(self, table: str) -> list[dict]:
        """Every row of one recorded table (none when it wrote no file)."""
        import pyarrow.dataset as ds

        if not any((self.out / table).rglob("*.parquet")):
            return []
        return ds.dataset(self.out / table, format="parquet",
                          partitioning="hive").to_table().to_pylist()

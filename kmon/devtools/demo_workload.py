"""``kmon demo``: an embedded cluster, a small realistic workload, and kmon watching it."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

from kmon.devtools.children import Spawned, python_module, spawn, stderr_tail, stop_all

SHORT_IDLE_MS = 5000
# librdkafka's mock cluster holds the rebalance a member joining a settled group starts for
# the group's session timeout less 1 s: a consumer slower to start than the other (a busy
# machine) waited 44 s at the 45 s default; at this one it waits 9 s
GROUP_SESSION_MS = 10_000


@dataclass(frozen=True)
class DemoClient:
    """One workload process of the demo."""

    label: str
    kind: str
    instrument: bool = True
    idle_ms: int | None = None
    produce_every: float = 0.0
    group: str | None = None
    client_id: str | None = None
    session_ms: int | None = None

    def argv(self, bootstrap: str) -> list[str]:
        argv = python_module("kmon.devtools.workload", self.kind, bootstrap)
        if self.instrument:
            argv.append("--instrument")
        if self.idle_ms is not None:
            argv += ["--idle-ms", str(self.idle_ms)]
        if self.produce_every:
            argv += ["--produce-every", str(self.produce_every)]
        if self.group:
            argv += ["--group", self.group]
        if self.client_id:
            argv += ["--client-id", self.client_id]
        if self.session_ms:
            argv += ["-X", f"session.timeout.ms={self.session_ms}"]
        return argv


WORKLOAD = (
    DemoClient("producer", "producer", produce_every=1.0, client_id="orders-writer"),
    DemoClient("consumer A (group orders)", "consumer", group="orders",
               client_id="orders-reader-a", session_ms=GROUP_SESSION_MS),
    DemoClient("consumer B (group orders)", "consumer", group="orders",
               client_id="orders-reader-b", session_ms=GROUP_SESSION_MS),
    DemoClient("uninstrumented producer", "producer", instrument=False, produce_every=5.0),
    DemoClient(f"idle producer (reaped after {SHORT_IDLE_MS // 1000}s)", "producer",
               idle_ms=SHORT_IDLE_MS, client_id="audit-writer"),
)


class DemoError(Exception):
    """The demo's cluster or workload could not start."""


class Demo:
    """Starts the cluster and workload as children; ``close()`` stops them all."""

    def __init__(self, brokers: int = 3, kafka: bool = False) -> None:
        self.children: list[subprocess.Popen[str]] = []
        self.brokers = brokers
        self.kafka = kafka
        self.bootstrap = ""
        self.clients: dict[int, DemoClient] = {}

    def start(self) -> None:
        cluster = self._spawn(python_module("kmon", "devcluster", "--brokers",
                                            str(self.brokers),
                                            *(["--kafka"] if self.kafka else [])))
        self.bootstrap = _first_line(cluster, "the Kafka cluster" if self.kafka
                                     else "the embedded cluster")
        started = [(client, self._spawn(client.argv(self.bootstrap))) for client in WORKLOAD]
        for client, child in started:
            _first_line(child, client.label)
            self.clients[child.pid] = client

    def _spawn(self, argv: list[str]) -> Spawned:
        child = spawn(argv, env=dict(os.environ))
        self.children.append(child)
        return child

    def close(self) -> None:
        stop_all(self.children)

    def __enter__(self) -> Demo:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _first_line(child: Spawned, what: str) -> str:
    """The child's first line of output (it exits by itself if it cannot start)."""
    line = child.stdout.readline().strip() if child.stdout else ""
    if not line:
        code = child.wait()
        said = stderr_tail(child)
        raise DemoError(f"{what} did not start (exit code {code})"
                        + (f"; it said:\n{said}" if said else ""))
    return line

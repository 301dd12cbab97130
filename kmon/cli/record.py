"""``kmon record``: watch client processes headless and write the session to Parquet."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from kmon.cli import options
from kmon.errors import UserError
from kmon.units import duration_arg, pid_arg

if TYPE_CHECKING:  # the rest is imported when the command runs: every kmon command builds
    # the parser, and pyarrow alone takes a fifth of a second to import
    from kmon.engine.discovery import ClientDiscovery
    from kmon.engine.monitor import Monitor
    from kmon.engine.sampler import SamplerSettings
    from kmon.model import Event, Snapshot
    from kmon.record.recorder import Recorder, Summary
    from kmon.sources.cluster import ClusterMetadata
    from kmon.sources.sockets import Endpoint

DISCOVER_EVERY_S = 10.0  # --cluster: how often the host's sockets are searched for clients
STOP_CHECK_S = 0.1  # how quickly a stop signal ends the wait between polls


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``record`` options to ``parser``."""

    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--pid", type=pid_arg, action="append", metavar="PID",
                       help="a client process to record (repeat for more)")
    which.add_argument("--cluster", metavar="HOST:PORT,...|NAME",
                       help="record every local process connected to this cluster's brokers "
                       "(bootstrap servers, or a cluster named in the config file)")
    options.client_properties(parser, "for --cluster (KEY=@FILE reads the value from FILE)")
    options.config_file(parser)
    parser.add_argument("--out", required=True, type=Path, metavar="DIR",
                        help="root directory of the recorded tables")
    options.interval(parser, default=1.0)
    parser.add_argument("--duration", type=duration_arg, default=None, metavar="DURATION",
                        help="stop after this long, e.g. 10m (default: until SIGINT/SIGTERM)")
    options.cluster_timeout(parser, 10.0)
    options.broker_idle(parser)
    options.wire(parser)
    parser.add_argument("--any-process", action="store_true",
                        help="record even a --pid that shows no sign of Kafka")
    parser.add_argument("--flush-every", type=duration_arg, default=10.0,
                        help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    """Record until the duration ends, a stop signal, or (with --pid) every process exits."""
    from kmon.config import load_config
    from kmon.engine.discovery import ClientDiscovery
    from kmon.engine.heap import settle_heap
    from kmon.engine.host_churn import HostTimeWaits
    from kmon.engine.kernel_watch import open_kernel_watch
    from kmon.engine.monitor import Monitor
    from kmon.engine.sampler import ProcessSampler, SampleError, SamplerSettings
    from kmon.record.recorder import Recorder, new_session_id
    from kmon.sources.cluster import ClusterUnreachable, fetch_metadata
    from kmon.sources.sockets import open_socket_reader
    from kmon.sources.spool import SpoolError

    root = _writable_dir(args.out)
    try:
        reader = open_socket_reader()
        config = load_config(args.config)
        cluster = None
        if args.cluster:
            named = config.resolve_cluster(args.cluster, dict(args.properties))
            cluster = fetch_metadata(named.bootstrap, named.properties, args.cluster_timeout)
        settings = SamplerSettings(broker_idle_ms=options.broker_idle_ms(
                                       args, cluster.broker_idle_ms if cluster else None),
                                   cluster=cluster,
                                   require_kafka=cluster is None and not args.any_process,
                                   middlebox_idle_ms=config.thresholds.middlebox_idle_ms,
                                   wire=args.wire)
        kernel, unseen = open_kernel_watch(b.port for b in cluster.brokers) if cluster else (
            open_kernel_watch())
        monitor = Monitor((ProcessSampler(pid, reader, settings)
                           for pid in dict.fromkeys(args.pid or ())),
                          max_events=1,  # events go to disk, not to a history
                          near_reap_fraction=config.thresholds.idle_warning, churn=config.churn,
                          kernel=kernel, host_closes=HostTimeWaits() if unseen else None)
        session_id = new_session_id(monitor.host)
        recorder = Recorder(root, monitor.host, session_id, round(args.interval * 1000),
                            args.flush_every)  # writes nothing before its first add()
        discovery = ClientDiscovery(reader, settings, DISCOVER_EVERY_S) if cluster else None
        brokers = _broker_endpoints(cluster, settings) if cluster else frozenset()
        if discovery:
            discovery.update(monitor, brokers)
        first = monitor.poll()  # bad PIDs fail here, before any file is written
    except (SampleError, SpoolError, ClusterUnreachable, OSError) as err:
        raise UserError(str(err)) from err
    if monitor.all_exited:
        raise UserError(monitor.last_loss)

    watching = (f"clients of {args.cluster} ({len(monitor.samplers)} found so far)" if cluster
                else "PID " + ", ".join(str(pid) for pid in monitor.samplers))
    print(f"kmon record: session {session_id}: {watching}, every {args.interval:g}s, "
          f"into {root}", file=sys.stderr, flush=True)
    if unseen is not None:
        print(f"kmon record: {unseen}", file=sys.stderr, flush=True)
    settle_heap()
    with StopSignals() as stop:
        try:
            why = _record(monitor, recorder, discovery, brokers, first, args.interval,
                          args.duration, stop)
        except Exception as err:  # noqa: BLE001 - whatever broke the loop, close the session
            summary = _close(recorder, root)
            raise UserError(f"{err or type(err).__name__}; recording stopped, "
                            f"{_describe(summary, root)}") from err
        summary = _close(recorder, root)
    print(f"kmon record: session {session_id} stopped ({why}): {_describe(summary, root)}",
          file=sys.stderr, flush=True)
    return 0



class StopSignals:
    """While active, SIGINT, SIGTERM and SIGHUP ask for a clean stop instead of ending the
    process."""

    def __init__(self) -> None:
        self.received: str | None = None
        self.previous: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, _frame: object) -> None:
        self.received = signal.Signals(signum).name

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True as soon as a stop signal has arrived."""
        deadline = time.monotonic() + seconds
        while self.received is None and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, STOP_CHECK_S))
        return self.received is not None


def _record(monitor: Monitor, recorder: Recorder, discovery: ClientDiscovery | None,
            brokers: frozenset[Endpoint], first: tuple[Snapshot, list[Event]],
            interval: float, duration: float | None, stop: StopSignals) -> str:
    """The poll loop; returns why it ended."""
    started = time.monotonic()
    ends = started + duration if duration else None
    snapshot, events = first
    while True:
        recorder.add(snapshot, events)
        if discovery is None and monitor.all_exited:
            return "every recorded process exited"
        wake = started + interval
        if stop.wait(min(wake, ends or wake) - time.monotonic()):
            return stop.received
        if ends is not None and time.monotonic() >= ends:
            return "duration reached"
        started = time.monotonic()
        if discovery:
            discovery.update(monitor, brokers)
        snapshot, events = monitor.poll()


def _broker_endpoints(cluster: ClusterMetadata, settings: SamplerSettings) -> frozenset[Endpoint]:
    """Every endpoint of the cluster's brokers and of its bootstrap addresses."""
    resolver = settings.resolver
    return resolver.look_up([b.address for b in cluster.brokers]
                            + cluster.bootstrap.split(","))


def _writable_dir(path: Path) -> Path:
    """``path``, created if need be, once kmon may write there (see kmon.files.OutputDir);
    UserError if not."""
    from kmon.files import OutputDir, UnsafeFile

    try:
        OutputDir.open_writable(path).close()
    except UnsafeFile as err:
        raise UserError(f"--out: {err}") from err
    return path.resolve()


def _close(recorder: Recorder, root: Path) -> Summary:
    try:
        return recorder.close()
    except OSError as err:
        raise UserError(f"cannot write the recording under {root}: {err}") from err


def _describe(summary: Summary, root: Path) -> str:
    rows = ", ".join(f"{table} {count}" for table, count in summary.rows.items())
    return (f"{sum(summary.rows.values())} rows ({rows}) in {len(summary.files)} files, "
            f"{summary.bytes:,} bytes, under {root}")

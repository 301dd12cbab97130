"""``kmon serve``: the host agent — every Kafka client on this host as Prometheus metrics."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING

from kmon.cli import options
from kmon.errors import UserError
from kmon.export.cluster_names import ClusterNames

if TYPE_CHECKING:  # imported when the command runs (see kmon.cli.record)
    from kmon.cli.config import Config
    from kmon.engine.facade import HostSession
    from kmon.export.metrics import HostMetrics
    from kmon.model import Event, Snapshot
    from kmon.record.rotation import RotatingRecorder

DEFAULT_LISTEN = "127.0.0.1:9464"
ROTATE_EVERY_S = 3600.0  # --record: a session an hour, so retention frees space as it goes
STALE_POLLS = 3  # /healthz fails once the last good poll is this many intervals old,
STALE_GRACE_S = 10.0  # and this much older (the default of --stale-after)


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``serve`` options to ``parser``."""
    parser.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT", type=_listen,
                        help=f"where /metrics and /healthz answer (default {DEFAULT_LISTEN}; "
                             "only this address is bound)")
    options.interval(parser, "polls of the host's clients", default=5.0)
    parser.add_argument("--stale-after", type=options.interval_arg, default=None,
                        metavar="DURATION", help="/healthz answers 503 once the last good "
                        f"poll is this old (default {STALE_POLLS} intervals + "
                        f"{STALE_GRACE_S:g}s)")
    parser.add_argument("--duration", type=options.duration_arg, default=None,
                        metavar="DURATION", help="stop after this long (default: until "
                        "SIGINT/SIGTERM; SIGHUP reloads the config file)")
    options.config_file(parser)
    options.cluster(parser)  # -b: serve only that cluster's clients, with its brokers' limit
    options.wire(parser)
    parser.add_argument("--record", type=Path, default=None, metavar="DIR",
                        help="also record every poll to Parquet under DIR (as kmon record)")
    options.rotation(parser, ROTATE_EVERY_S)


def _listen(text: str) -> str:
    """--listen's value, checked while parsing: a bad one is a usage error (exit 2)."""
    from kmon.export.http import parse_listen

    try:
        parse_listen(text)
    except UserError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("--listen ")) from err
    return text


class Agent:
    """The host view polled for the metrics and, with --record, the recording (one engine,
    two outputs); ``reload()`` rebuilds it from the config file."""

    def __init__(self, args: argparse.Namespace, metrics: HostMetrics,
                 recorder: RotatingRecorder | None) -> None:
        from kmon.cli.config import load_config

        self.args, self.metrics, self.recorder = args, metrics, recorder
        self.members: set[int] = set()  # the processes served, while they live
        self.lost_before = 0  # kernel events dropped under the sessions a reload replaced
        self.session = self._session(load_config(args.config))
        self.last_error = ""

    def _session(self, config: Config) -> HostSession:
        from kmon.cli import wiring
        from kmon.engine.facade import HostTarget, open_session

        named = wiring.named_cluster(self.args, config)
        cluster = wiring.cluster_state(named, self.args) if named else None
        self.names = ClusterNames((cluster.metadata.cluster_id or named.name)
                                  if named and cluster else None)
        session = open_session(HostTarget(cluster), wiring.engine_settings(
            self.args, config, named, cluster, require_kafka=False,
            interval_ms=round(self.args.interval * 1000)))
        self.metrics.kernel_events = session.kernel_notice is None
        if session.kernel_notice:  # what the journal should say once: a missing capability
            print(f"kmon serve: {session.kernel_notice}", file=sys.stderr, flush=True)
        return session

    def step(self) -> None:
        """One poll into the metrics; a failed poll (or a failure in folding it in) is
        counted and told once, not fatal."""
        try:
            self._poll()
        except Exception as err:  # noqa: BLE001 - an agent outlives a bad poll
            self.failed("poll failed", err)

    def failed(self, what: str, err: Exception) -> None:
        """Count a failed step in kmon_poll_errors_total and tell it once."""
        self.metrics.poll_failed()
        self._tell(f"kmon serve: {what}: {err or type(err).__name__}")

    def _poll(self) -> None:
        began = time.monotonic()
        snapshot, events = self.session.poll()
        labels = self.names(self._members(snapshot, events),
                            self.session.answered_clusters(snapshot),
                            self.session.clusters_asked(snapshot))
        self.metrics.kernel_lost = self.lost_before + self.session.kernel_lost
        self.metrics.update(*_only(snapshot, events, labels.keys()), labels,
                            time.monotonic() - began)
        if self.recorder is not None:
            try:
                self.recorder.add(snapshot, events)
            except OSError as err:  # a full disk stops the recording, not the metrics
                self._tell(f"kmon serve: recording stopped: {err}")
                self.recorder = None

    def _members(self, snapshot: Snapshot, events: list[Event]) -> set[int]:
        """The processes served: every one, or (-b) the named cluster's clients, those the
        session finds now or found since kmon saw them, while they live (a client made per
        message holds no connection between messages: its series would come and go, its
        counters start again each time)."""
        live = {view.pid for view in snapshot.processes}
        self.members = live & (self.members | self.session.of_cluster(snapshot, events))
        return self.members

    def reload(self) -> None:
        """SIGHUP: read the config file again and start a new session from it; a bad file
        is told and the running session kept."""
        from kmon.cli.config import load_config

        try:
            session = self._session(load_config(self.args.config))
        except UserError as err:
            self._tell(f"kmon serve: config not reloaded: {err}")
            return
        self.session, old = session, self.session
        self.lost_before += old.kernel_lost
        old.close()
        print("kmon serve: config reloaded", file=sys.stderr, flush=True)

    def _tell(self, message: str) -> None:
        from kmon.present.plain_text import one_line

        if message != self.last_error:  # the same failure every 5 s is told once
            self.last_error = message
            print(one_line(message), file=sys.stderr, flush=True)

    def close(self) -> str:
        """Release the engine and close the recording (its last part written); what it
        left."""
        self.session.close()
        if self.recorder is None:
            return ""
        try:
            summary = self.recorder.close()
        except OSError as err:
            return f"; the recording under {self.recorder.root} could not be closed: {err}"
        return (f"; recorded {sum(summary.rows.values())} rows in {len(summary.files)} files "
                f"under {self.recorder.root}")


def _only(snapshot: Snapshot, events: list[Event], pids: Collection[int]
          ) -> tuple[Snapshot, list[Event]]:
    """``snapshot`` and ``events`` of the processes ``pids`` only."""
    return (dataclasses.replace(snapshot, processes=[v for v in snapshot.processes
                                                     if v.pid in pids]),
            [e for e in events if e.pid in pids])


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM (or --duration); SIGHUP reloads the config file."""
    from prometheus_client import CollectorRegistry

    from kmon.engine.facade import settle_heap
    from kmon.export.collector import HostCollector
    from kmon.export.http import Exposition, MetricsServer, fresh_within
    from kmon.export.loop import Signals, run_loop
    from kmon.export.metrics import HostMetrics

    metrics = HostMetrics()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(HostCollector(metrics))
    stale_after = args.stale_after or STALE_POLLS * args.interval + STALE_GRACE_S
    healthy = fresh_within(lambda: metrics.poll_stats().last_success_s, stale_after,
                           time.time())
    exposition = Exposition(registry, lambda: metrics.generation)
    server = MetricsServer(args.listen, exposition, healthy)  # a port in use fails first

    def step() -> None:  # a poll, then /metrics rendered from it off the scrapers' path
        agent.step()
        try:
            exposition.prepare()
        except Exception as err:  # noqa: BLE001 - a bad render must not end the agent
            agent.failed("metrics not rendered", err)

    try:
        agent = Agent(args, metrics, _recorder(args))
    except BaseException:
        server.close()
        raise
    print(f"kmon serve: http://{server.address}/metrics, polling every {args.interval:g}s",
          file=sys.stderr, flush=True)
    settle_heap()  # as the host view's: a poll's young objects, not the heap, collected
    try:
        with Signals(reloads=True) as signals:
            why = run_loop(step, args.interval, signals, args.duration, agent.reload)
    finally:
        server.close()
        left = agent.close()
    print(f"kmon serve: stopped ({why}){left}", file=sys.stderr, flush=True)
    return 0


def _recorder(args: argparse.Namespace) -> RotatingRecorder | None:
    """--record's recorder (nothing written before the first poll); UserError where kmon
    must not write."""
    if args.record is None:
        return None
    import platform

    from kmon.cli.record import rotation_limits
    from kmon.files import UnsafeFile
    from kmon.record.rotation import RotatingRecorder

    try:
        return RotatingRecorder(args.record, platform.node(), round(args.interval * 1000),
                                rotation_limits(args))
    except UnsafeFile as err:
        raise UserError(f"--record: {err}") from err

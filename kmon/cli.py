"""The ``kmon`` command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from kmon import __version__
from kmon.errors import UserError
from kmon.units import duration_arg, pid_arg, positive_int_arg, property_arg

EXIT_ERROR = 1
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one clear line instead of usage + error
        self.exit(EXIT_USAGE, f"kmon: error: {message} (see '{self.prog} --help')\n")

def _dashboard_options(parser: argparse.ArgumentParser) -> None:
    """Options every dashboard command takes."""
    parser.add_argument("--theme", metavar="NAME", help="Textual theme, e.g. nord, dracula")
    parser.add_argument("--config", type=Path, metavar="FILE",
                        help="config file (default $KMON_CONFIG, ~/.config/kmon/config.toml)")
    parser.add_argument("--record-dir", type=Path, default=Path("kmon-sessions"), metavar="DIR",
                        help="where the r key records sessions (default ./kmon-sessions)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kmon", description="Every TCP connection a Kafka client holds, "
                     "what it is for, and when it will be reaped.")
    parser.add_argument("--version", action="version", version=f"kmon {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    attach = commands.add_parser("attach", help="watch the connections of one client process")
    attach.add_argument("pid", type=pid_arg, help="process id of the Kafka client")
    attach.add_argument("--once", action="store_true", help="print one snapshot and exit")
    attach.add_argument("--json", action="store_true",
                        help="JSON: one object per snapshot, one per line")
    attach.add_argument("--interval", type=duration_arg, default=None, metavar="DURATION",
                        help="time between snapshots, e.g. 500ms, 2s (default 1s)")
    attach.add_argument("--bootstrap-servers", "-b", metavar="HOST:PORT,...",
                        help="the cluster, to name the brokers of unmatched sockets")
    attach.add_argument("-X", dest="properties", type=property_arg, action="append", default=[],
                        metavar="KEY=VALUE", help="client property for --bootstrap-servers")
    attach.add_argument("--cluster-timeout", type=duration_arg, default=10.0, metavar="DURATION",
                        help="how long to wait for the cluster's metadata (default 10s)")
    attach.add_argument("--broker-idle-ms", type=positive_int_arg, default=600_000,
                        help="the brokers' connections.max.idle.ms (default 600000)")
    attach.add_argument("--socket-reader", choices=("auto", "sock_diag", "psutil"),
                        default="auto", help="how sockets are read (default: fastest)")
    attach.add_argument("--any-process", action="store_true",
                        help="attach even to a process that shows no sign of Kafka")
    attach.add_argument("--client-log", type=Path, metavar="FILE",
                        help="a Java client's log to follow (NetworkClient lines: node ids, "
                        "addresses, open order)")
    _dashboard_options(attach)

    watch = commands.add_parser("watch", help="a cluster's brokers, groups and local clients")
    watch.add_argument("cluster", metavar="CLUSTER",
                       help="bootstrap servers host:port,... or a cluster named in the config")
    watch.add_argument("-X", dest="properties", type=property_arg, action="append", default=[],
                       metavar="KEY=VALUE", help="client property, e.g. security.protocol=SSL")
    watch.add_argument("--interval", type=duration_arg, default=None, metavar="DURATION",
                       help="time between refreshes of the local clients (default 1s)")
    watch.add_argument("--metadata-every", type=duration_arg, default=30.0, metavar="DURATION",
                       help="time between refreshes of the cluster's metadata (default 30s)")
    watch.add_argument("--cluster-timeout", type=duration_arg, default=5.0, metavar="DURATION",
                       help="how long to wait for the cluster's answers (default 5s)")
    watch.add_argument("--broker-idle-ms", type=positive_int_arg, default=600_000,
                       help="the brokers' connections.max.idle.ms (default 600000)")
    _dashboard_options(watch)

    replay = commands.add_parser("replay", help="the attach dashboard over a recording made "
                                 "with kmon attach PID --json > FILE")
    replay.add_argument("file", type=Path, metavar="FILE", help="JSON lines of kmon snapshots")
    replay.add_argument("--pid", type=pid_arg, default=None,
                        help="the process to show (default: the first one recorded)")
    replay.add_argument("--interval", type=duration_arg, default=None, metavar="DURATION",
                        help="time between frames (default: as recorded)")
    _dashboard_options(replay)

    run = commands.add_parser("run", help="run a confluent-kafka program with kmon's agent")
    run.add_argument("program", nargs=argparse.REMAINDER, help="-- command and arguments")

    demo = commands.add_parser("demo", help="an embedded cluster and workload, watched by kmon")
    demo.add_argument("--headless", action="store_true",
                      help="no live screen: print snapshots (with --json, as JSON lines)")
    demo.add_argument("--json", action="store_true", help="JSON lines, one per snapshot")
    demo.add_argument("--duration", type=duration_arg, default=None, metavar="DURATION",
                      help="stop after this long (default: until Ctrl-C)")
    demo.add_argument("--interval", type=duration_arg, default=None, metavar="DURATION")
    _dashboard_options(demo)

    from kmon.record import command as record_command

    record = commands.add_parser("record", help="record sessions to Parquet, headless")
    record_command.configure(record)

    from kmon.analysis import command as analyze_command

    analyze = commands.add_parser("analyze", help="fleet analysis of recordings on Spark")
    analyze_command.configure(analyze)

    from kmon import simulate

    simulate_fleet = commands.add_parser("simulate-fleet",
                                         help="write a modelled fleet's sessions, for analysis")
    simulate.configure(simulate_fleet)

    devcluster = commands.add_parser("devcluster", help="run an embedded mock Kafka cluster")
    devcluster.add_argument("--brokers", type=positive_int_arg, default=3)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handlers = {"attach": _attach, "watch": _watch_cluster, "replay": _replay, "run": _run,
                "demo": _demo, "devcluster": _devcluster, "record": _record,
                "simulate-fleet": _simulate_fleet, "analyze": _analyze}
    handler = handlers[args.command]
    try:
        return handler(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        sys.stderr.close()  # the reader went away (| head): nothing left to say
        return 0
    except UserError as err:
        print(f"kmon: error: {err}", file=sys.stderr)
        return EXIT_ERROR


def _interactive(args: argparse.Namespace) -> bool:
    """True when the dashboard should open: a terminal, and no text output asked for."""
    return (not getattr(args, "json", False) and not getattr(args, "once", False)
            and not getattr(args, "headless", False) and sys.stdout.isatty()
            and sys.stdin.isatty())


def _attach(args: argparse.Namespace) -> int:
    from kmon.config import load_config
    from kmon.monitor import Monitor
    from kmon.sampler import ProcessSampler, SampleError, SamplerSettings
    from kmon.sources.cluster import ClusterUnreachable, admin_client, fetch_cluster
    from kmon.sources.sockets import open_socket_reader
    from kmon.spool import SpoolError

    try:
        config = load_config(args.config)
        from widgets.launch import checked_theme

        theme = checked_theme(config, args.theme)
        cluster, groups = None, None
        if args.bootstrap_servers:
            state = fetch_cluster(admin_client(args.bootstrap_servers, dict(args.properties)),
                                  args.bootstrap_servers, args.cluster_timeout)
            cluster, groups = state.metadata, state.groups
        settings = SamplerSettings(broker_idle_ms=args.broker_idle_ms, cluster=cluster,
                                   groups=groups, require_kafka=not args.any_process)
        sampler = ProcessSampler(args.pid, open_socket_reader(args.socket_reader), settings,
                                 client_log=args.client_log)
        interactive = _interactive(args)
        monitor = Monitor([sampler], history=1 if interactive else 600)
        try:
            if interactive:
                from widgets.launch import dashboard_settings, run_attach

                return run_attach(args.pid, monitor,
                                  dashboard_settings(config, args.interval, args.record_dir),
                                  theme, cluster=args.bootstrap_servers or "")
            interval = args.interval or config.dashboard.interval_s or 1.0
            return _watch(monitor, interval, json_lines=args.json, once=args.once)
        finally:
            monitor.close()
    except BrokenPipeError:
        raise
    except (SampleError, SpoolError, ClusterUnreachable, OSError) as err:
        raise UserError(str(err)) from err


def _watch_cluster(args: argparse.Namespace) -> int:
    from kmon.cluster_watch import ClusterWatcher
    from kmon.config import load_config
    from kmon.sampler import SamplerSettings
    from widgets.launch import checked_theme, dashboard_settings, run_watch

    config = load_config(args.config)
    cluster = config.resolve_cluster(args.cluster, dict(args.properties))
    theme = checked_theme(config, args.theme)
    if not _interactive(args):
        raise UserError("kmon watch is a dashboard and needs a terminal; for text output use "
                        "kmon attach PID --json or kmon record --cluster")
    watcher = ClusterWatcher(cluster.bootstrap, cluster.properties, timeout_s=args.cluster_timeout,
                             refresh_s=args.metadata_every)
    settings = SamplerSettings(broker_idle_ms=args.broker_idle_ms, require_kafka=False)
    return run_watch(cluster.name, watcher, settings,
                     dashboard_settings(config, args.interval, args.record_dir), theme)


def _replay(args: argparse.Namespace) -> int:
    from kmon.config import load_config
    from kmon.replay import Replay, read_recording, recorded_interval_s
    from widgets.launch import checked_theme, dashboard_settings, run_attach

    config = load_config(args.config)
    theme = checked_theme(config, args.theme)
    frames = read_recording(args.file)
    pids = [p.pid for snapshot, _ in frames for p in snapshot.processes]
    pid = args.pid if args.pid is not None else (pids[0] if pids else None)
    if pid not in pids:
        raise UserError(f"{args.file} holds no snapshot of PID {pid}")
    if not _interactive(args):
        raise UserError("kmon replay is a dashboard and needs a terminal")
    interval = args.interval or recorded_interval_s(frames)
    return run_attach(pid, Replay(frames), dashboard_settings(config, interval, args.record_dir),
                      theme, cluster=f"replay of {args.file}")


def _watch(monitor, interval: float, json_lines: bool, once: bool = False,
           duration: float | None = None, title: str = "",
           labels: dict[int, str] | None = None, live_screen: bool = True) -> int:
    """Poll ``monitor`` every ``interval`` until ``once``, ``duration``, or every process exits.

    Prints JSON lines, or a Rich view (redrawn in place on a terminal unless
    ``live_screen`` is off). Exits with an error once no watched process is left.
    """
    from rich.console import Console
    from rich.live import Live

    from widgets.tables import snapshot_renderable

    console = Console()
    live = None
    if live_screen and not json_lines and not once and console.is_terminal:
        live = Live(console=console, auto_refresh=False, transient=False)
        live.start()
    ends = time.monotonic() + duration if duration else None
    first = True
    try:
        while True:
            started = time.monotonic()
            snapshot, events = monitor.poll()
            if monitor.all_exited and first:
                raise UserError(monitor.last_loss)  # nothing was ever shown: just say why
            first = False
            if json_lines:
                record = snapshot.to_dict()
                record["events"] = [e.to_dict() for e in events]
                print(json.dumps(record), flush=True)
            elif snapshot.processes:
                view = snapshot_renderable(snapshot, monitor.events, title, labels)
                live.update(view, refresh=True) if live else console.print(view)
            if monitor.all_exited:
                raise UserError(monitor.last_loss)
            if once or (ends is not None and time.monotonic() >= ends):
                return 0
            time.sleep(max(0.0, interval - (time.monotonic() - started)))
    finally:
        if live:
            live.stop()


def _demo(args: argparse.Namespace) -> int:
    from kmon.config import load_config
    from kmon.demo import Demo, DemoError
    from kmon.monitor import Monitor
    from kmon.sampler import ProcessSampler, SampleError, SamplerSettings
    from kmon.sources.sockets import open_socket_reader

    config = load_config(args.config)
    interactive = _interactive(args)
    if interactive:
        from widgets.launch import checked_theme

        theme = checked_theme(config, args.theme)
    print("kmon demo: starting an embedded 3-broker cluster and 5 client processes...",
          file=sys.stderr, flush=True)
    try:
        with Demo() as demo:
            labels = {pid: client.label for pid, client in demo.clients.items()}
            if interactive:
                return _demo_dashboard(demo, labels, config, args, theme)
            reader, settings = open_socket_reader(), SamplerSettings()
            monitor = Monitor(ProcessSampler(pid, reader, settings) for pid in demo.clients)
            return _watch(monitor, args.interval or 1.0, json_lines=args.json,
                          duration=args.duration, labels=labels, live_screen=not args.headless,
                          title=f"kmon demo — cluster {demo.bootstrap} (Ctrl-C to stop)")
    except BrokenPipeError:
        raise
    except (DemoError, SampleError, OSError) as err:
        raise UserError(str(err)) from err


def _demo_dashboard(demo, labels: dict[int, str], config, args: argparse.Namespace,
                    theme: str | None) -> int:
    """``kmon watch`` on the demo's cluster, its clients listed from the start."""
    from kmon.cluster_watch import ClusterWatcher
    from kmon.sampler import SamplerSettings
    from widgets.launch import dashboard_settings, run_watch

    watcher = ClusterWatcher(demo.bootstrap, {}, refresh_s=10.0)
    return run_watch("demo", watcher, SamplerSettings(require_kafka=False),
                     dashboard_settings(config, args.interval, args.record_dir), theme,
                     pids=list(demo.clients), labels=labels, exit_after_s=args.duration)


def _run(args: argparse.Namespace) -> int:
    from kmon.autoinstrument import run_environment

    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        raise UserError("kmon run needs a program: kmon run -- python app.py")
    try:
        os.execvpe(program[0], program, run_environment(dict(os.environ)))
    except OSError as err:
        raise UserError(f"cannot run {program[0]}: {err.strerror}") from err
    return EXIT_ERROR  # not reached: exec replaced this process


def _record(args: argparse.Namespace) -> int:
    from kmon.record import command

    return command.run(args)


def _analyze(args: argparse.Namespace) -> int:
    from kmon.analysis import command

    return command.run(args)


def _simulate_fleet(args: argparse.Namespace) -> int:
    from kmon import simulate

    return simulate.run(args)


def _devcluster(args: argparse.Namespace) -> int:
    from kmon.devcluster import serve

    return serve(args.brokers)


if __name__ == "__main__":
    sys.exit(main())

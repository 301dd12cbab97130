"""The ``kmon`` command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from kmon import __version__
from kmon.units import parse_duration

EXIT_ERROR = 1
EXIT_USAGE = 2


class UserError(Exception):
    """A problem the user can fix; printed as one line, never a traceback."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one clear line instead of usage + error
        self.exit(EXIT_USAGE, f"kmon: error: {message} (see '{self.prog} --help')\n")


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number above zero")
    return value


def _pid(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a process id")
    return int(text)


def _property(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not key=value")
    return key.strip(), value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kmon", description="Every TCP connection a Kafka client holds, "
                     "what it is for, and when it will be reaped.")
    parser.add_argument("--version", action="version", version=f"kmon {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    attach = commands.add_parser("attach", help="watch the connections of one client process")
    attach.add_argument("pid", type=_pid, help="process id of the Kafka client")
    attach.add_argument("--once", action="store_true", help="print one snapshot and exit")
    attach.add_argument("--json", action="store_true",
                        help="JSON: one object per snapshot, one per line")
    attach.add_argument("--interval", type=_duration, default=1.0, metavar="DURATION",
                        help="time between snapshots, e.g. 500ms, 2s (default 1s)")
    attach.add_argument("--bootstrap-servers", "-b", metavar="HOST:PORT,...",
                        help="the cluster, to name the brokers of unmatched sockets")
    attach.add_argument("-X", dest="properties", type=_property, action="append", default=[],
                        metavar="KEY=VALUE", help="client property for --bootstrap-servers")
    attach.add_argument("--broker-idle-ms", type=_positive_int, default=600_000,
                        help="the brokers' connections.max.idle.ms (default 600000)")
    attach.add_argument("--socket-reader", choices=("auto", "sock_diag", "psutil"),
                        default="auto", help="how sockets are read (default: fastest)")
    attach.add_argument("--any-process", action="store_true",
                        help="attach even to a process that shows no sign of Kafka")

    run = commands.add_parser("run", help="run a confluent-kafka program with kmon's agent")
    run.add_argument("program", nargs=argparse.REMAINDER, help="-- command and arguments")

    devcluster = commands.add_parser("devcluster", help="run an embedded mock Kafka cluster")
    devcluster.add_argument("--brokers", type=_positive_int, default=3)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = {"attach": _attach, "run": _run, "devcluster": _devcluster}[args.command]
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


def _attach(args: argparse.Namespace) -> int:
    from kmon.sampler import ProcessSampler, SampleError, SamplerSettings
    from kmon.sources.cluster import ClusterUnreachable, fetch_metadata
    from kmon.sources.sockets import open_socket_reader
    from kmon.spool import SpoolError

    try:
        cluster = None
        if args.bootstrap_servers:
            cluster = fetch_metadata(args.bootstrap_servers, dict(args.properties))
        settings = SamplerSettings(broker_idle_ms=args.broker_idle_ms, cluster=cluster,
                                   require_kafka=not args.any_process)
        sampler = ProcessSampler(args.pid, open_socket_reader(args.socket_reader), settings)
        return _attach_loop(args, sampler)
    except (SampleError, SpoolError, ClusterUnreachable, OSError) as err:
        raise UserError(str(err)) from err


def _attach_loop(args: argparse.Namespace, sampler) -> int:
    from kmon.monitor import Monitor

    monitor = Monitor([sampler])
    if args.json:
        return _stream_json(monitor, args.interval, args.once)
    return _show_rich(monitor, args.interval, args.once)


def _stream_json(monitor, interval: float, once: bool) -> int:
    while True:
        started = time.monotonic()
        snapshot, events = monitor.poll()
        record = snapshot.to_dict()
        record["events"] = [e.to_dict() for e in events]
        print(json.dumps(record), flush=True)
        if monitor.all_exited:
            raise UserError(next(iter(monitor.exited.values())))
        if once:
            return 0
        time.sleep(max(0.0, interval - (time.monotonic() - started)))


def _show_rich(monitor, interval: float, once: bool) -> int:
    from rich.console import Console
    from rich.live import Live

    from kmon.render import snapshot_renderable

    console = Console()
    snapshot, _ = monitor.poll()
    if once:
        if monitor.all_exited:
            raise UserError(next(iter(monitor.exited.values())))
        console.print(snapshot_renderable(snapshot, []))
        return 0
    with Live(snapshot_renderable(snapshot, []), console=console, auto_refresh=False) as live:
        while not monitor.all_exited:
            time.sleep(interval)
            snapshot, _ = monitor.poll()
            if snapshot.processes:
                live.update(snapshot_renderable(snapshot, monitor.events), refresh=True)
    raise UserError(next(iter(monitor.exited.values())))


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


def _devcluster(args: argparse.Namespace) -> int:
    from kmon.devcluster import serve

    return serve(args.brokers)


if __name__ == "__main__":
    sys.exit(main())

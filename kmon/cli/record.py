"""``kmon record``: watch client processes headless and write the session to Parquet."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from kmon.cli import options
from kmon.errors import UserError
from kmon.units import duration_arg, pid_arg

if TYPE_CHECKING:  # the rest is imported when the command runs: every kmon command builds
    # the parser, and pyarrow alone takes a fifth of a second to import
    from collections.abc import Callable

    from kmon.engine.facade import ClusterSession, LiveSession
    from kmon.model import Event, Snapshot
    from kmon.record.recorder import Summary
    from kmon.record.rotation import Limits, RotatingRecorder

DISCOVER_EVERY_S = 10.0  # --cluster: how often the host's sockets are searched for clients


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``record`` options to ``parser``."""

    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--pid", type=pid_arg, action="append", metavar="PID",
                       help="a client process to record (repeat for more)")
    options.cluster(parser, name_group=which)
    which.add_argument("--cluster", dest="bootstrap", help=argparse.SUPPRESS)  # the old name
    options.config_file(parser)
    parser.add_argument("--out", required=True, type=Path, metavar="DIR",
                        help="root directory of the recorded tables")
    options.interval(parser, default=1.0)
    parser.add_argument("--duration", type=duration_arg, default=None, metavar="DURATION",
                        help="stop after this long, e.g. 10m (default: until SIGINT/SIGTERM)")
    options.wire(parser)
    parser.add_argument("--any-process", action="store_true",
                        help="record even a --pid that shows no sign of Kafka")
    options.rotation(parser, None)
    parser.add_argument("--flush-every", type=duration_arg, default=10.0,
                        help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    """Record until the duration ends, a stop signal, or (with --pid) every process exits."""
    from kmon.cli import wiring
    from kmon.cli.config import load_config
    from kmon.engine.facade import (
        AttachFailed,
        LiveSession,
        ProcessTarget,
        open_session,
        settle_heap,
    )
    from kmon.export.loop import Signals, run_loop
    from kmon.record.rotation import RotatingRecorder

    root = _writable_dir(args.out)
    try:
        config = load_config(args.config)
        named = wiring.named_cluster(args, config)
        wiring.require_processes(args.pid or ())
        settings = wiring.engine_settings(
            args, config, named, require_kafka=named is None and not args.any_process,
            not_kafka_hint="pass --any-process, or record its cluster's clients with -b CLUSTER "
                           "instead of --pid",
            interval_ms=round(args.interval * 1000), discover_every_s=DISCOVER_EVERY_S,
            max_events=1)  # events go to disk, not to a history
        session = (open_session(ProcessTarget(tuple(args.pid)), settings) if named is None
                   else _cluster_session(wiring.cluster_target(named, args), settings))
        recorder = RotatingRecorder(root, session.host, round(args.interval * 1000),
                                    rotation_limits(args), args.flush_every)
        session_id = recorder.current.session_id  # nothing written before the first add()
        first = session.poll()  # bad PIDs fail here, before any file is written
    except (AttachFailed, OSError) as err:
        raise UserError(str(err)) from err
    by_pid = session if isinstance(session, LiveSession) else None  # --pid: processes named
    if by_pid is not None and by_pid.all_exited:
        raise UserError(by_pid.last_loss)

    watching = (f"clients of {args.bootstrap} ({len(session.pids)} found so far)" if named
                else "PID " + ", ".join(str(pid) for pid in session.pids))
    print(f"kmon record: session {session_id}: {watching}, every {args.interval:g}s, "
          f"into {root}", file=sys.stderr, flush=True)
    if session.kernel_notice is not None:
        print(f"kmon record: {session.kernel_notice}", file=sys.stderr, flush=True)
    settle_heap()
    with Signals() as signals:
        try:
            why = run_loop(_recording_step(session, recorder, first, by_pid),
                           args.interval, signals, args.duration)
        except Exception as err:  # noqa: BLE001 - whatever broke the loop, close the session
            summary = _close(recorder, root)
            raise UserError(f"{err or type(err).__name__}; recording stopped, "
                            f"{_describe(summary, root)}") from err
        finally:
            session.close()
        summary = _close(recorder, root)
    print(f"kmon record: session {session_id} stopped ({why}): {_describe(summary, root)}",
          file=sys.stderr, flush=True)
    return 0


def rotation_limits(args: argparse.Namespace) -> Limits:
    """The --rotate-every/--rotate-size/--retain/--max-disk limits."""
    from kmon.record.rotation import Limits

    return Limits(args.rotate_every, args.rotate_size, args.retain, args.max_disk)


def _cluster_session(target, settings) -> ClusterSession:
    """A session of the cluster's clients, its metadata asked first: a UserError saying why
    it did not answer."""
    from kmon.engine.facade import open_session

    session = open_session(target, settings)
    error = session.refresh_cluster().error
    if error is not None:
        session.close()
        raise UserError(error)
    return session


def _recording_step(session: LiveSession | ClusterSession, recorder: RotatingRecorder,
                    first: tuple[Snapshot, list[Event]],
                    by_pid: LiveSession | None) -> Callable[[], str | None]:
    """One poll into the recording (the first one already taken); why to stop, if so (``by_pid``,
    the session of the processes named by PID: once every one has exited)."""
    polled = [first]

    def step() -> str | None:
        if not polled:
            polled.append(session.poll())
        recorder.add(*polled.pop())
        if by_pid is not None and by_pid.all_exited:
            return "every recorded process exited"
        return None
    return step


def _writable_dir(path: Path) -> Path:
    """``path``, created if need be, once kmon may write there (see kmon.files.OutputDir);
    UserError if not."""
    from kmon.files import OutputDir, UnsafeFile

    try:
        OutputDir.open_writable(path).close()
    except UnsafeFile as err:
        raise UserError(f"--out: {err}") from err
    return path.resolve()


def _close(recorder: RotatingRecorder, root: Path) -> Summary:
    try:
        return recorder.close()
    except OSError as err:
        raise UserError(f"cannot write the recording under {root}: {err}") from err


def _describe(summary: Summary, root: Path) -> str:
    rows = ", ".join(f"{table} {count}" for table, count in summary.rows.items())
    return (f"{sum(summary.rows.values())} rows ({rows}) in {len(summary.files)} files, "
            f"{summary.bytes:,} bytes, under {root}")

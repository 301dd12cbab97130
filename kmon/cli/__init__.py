"""The ``kmon`` command line: one module per command, shared options in ``options``."""

from __future__ import annotations

import importlib
import os
import sys

from kmon import __version__
from kmon.cli import inherited  # noqa: F401  (first: see its docstring)
from kmon.cli.options import EXIT_ERROR, Parser
from kmon.errors import UserError
from kmon.sources.processes import own_processes
from kmon.sources.tls import uprobes

# command -> (module under kmon.cli, help)
COMMANDS = {
    "ps": ("ps", "list every Kafka client process on this host, by cluster (no terminal "
                 "needed)"),
    "attach": ("attach", "watch the connections of one client process"),
    "watch": ("watch", "a cluster's brokers, groups and local clients; with no CLUSTER "
                       "(or no command at all) every Kafka client on this host"),
    "replay": ("replay", "the attach dashboard over a recording made with "
                         "kmon attach PID --json > FILE"),
    "run": ("run", "run a confluent-kafka program with kmon's agent"),
    "demo": ("demo", "an embedded cluster and workload, watched by kmon"),
    "record": ("record", "record sessions to Parquet, headless"),
    "serve": ("serve", "the host agent: every Kafka client on this host as Prometheus "
                       "metrics on /metrics"),
    "analyze": ("analyze", "fleet analysis of recordings on Spark"),
    "simulate-fleet": ("simulate", "write a modelled fleet's sessions, for analysis"),
    "devcluster": ("devcluster", "run an embedded mock Kafka cluster, or with --kafka a real one"),
}

BECOMES_THE_PROGRAM = {"run"}  # commands whose process becomes the user's (exec)


def _command(name: str):
    return importlib.import_module(f"kmon.cli.{COMMANDS[name][0]}")


def build_parser() -> Parser:
    """The whole command line."""
    parser = Parser(prog="kmon", description="Every TCP connection a Kafka client holds, "
                    "what it is for, and when it will be reaped.")
    parser.add_argument("--version", action="version", version=f"kmon {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name, (_, text) in COMMANDS.items():
        _command(name).configure(commands.add_parser(name, help=text))
    return parser


def with_command(parser: Parser, argv: list[str]) -> list[str]:
    """``argv`` with its command: none (``kmon``, ``kmon --interval 2s``) is the host view,
    ``kmon watch``; options before a named command are a usage error that shows them after."""
    if not argv or argv[0] in COMMANDS or not argv[0].startswith("-") or argv[0] in (
            "-h", "--help", "--version"):
        return argv or ["watch"]
    named = next((i for i, word in enumerate(argv) if word in COMMANDS), None)
    if named is None:
        return ["watch", *argv]
    moved = " ".join([argv[named], *argv[:named], *argv[named + 1:]])
    parser.error(f"options go after the command: kmon {moved}")
    raise AssertionError("not reached")  # parser.error exits


def main(argv: list[str] | None = None) -> int:
    """Run one kmon command; user errors are one line on stderr and exit 1."""
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(with_command(parser, argv))
    own = args.command not in BECOMES_THE_PROGRAM
    if own:  # never listed by kmon as a Kafka client (kmon.sources.processes.own_processes)
        own_processes.register(os.getpid())
        uprobes.hook_exit_signals()  # the TLS source's uprobes go when a signal ends kmon
        if os.geteuid() == 0:
            uprobes.remove_stale()  # and those a killed kmon left
    try:
        return _command(args.command).run(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        sys.stderr.close()  # the reader went away (| head): nothing left to say
        return 0
    except UserError as err:
        from kmon.present.plain_text import one_line  # names others chose: no escape reaches stderr

        print(f"kmon: error: {one_line(err)}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        if own:
            own_processes.unregister(os.getpid())


if __name__ == "__main__":
    sys.exit(main())

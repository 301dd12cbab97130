"""``kmon run -- PROGRAM``: run an unmodified confluent-kafka program with kmon's agent.

Exit codes as env(1) has them: 2 with no program, 127 for one not found, 126 for one
that cannot be run."""

from __future__ import annotations

import argparse
import os
import sys

from kmon.cli.options import EXIT_ERROR, EXIT_USAGE
from kmon.present.plain_text import one_line

EXIT_CANNOT_RUN, EXIT_NOT_FOUND = 126, 127  # as env(1) and the shell say them


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``run`` arguments to ``parser``."""
    parser.add_argument("program", nargs=argparse.REMAINDER, help="-- command and arguments")


def run(args: argparse.Namespace) -> int:
    """Replace this process with the program, its clients instrumented."""
    from kmon.agent.autoinstrument import run_environment

    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        print("kmon: error: kmon run needs a program: kmon run -- python app.py",
              file=sys.stderr)
        return EXIT_USAGE
    try:
        os.execvpe(program[0], program, run_environment(dict(os.environ)))
    except OSError as err:
        print(f"kmon: error: cannot run {one_line(program[0])}: {err.strerror}",
              file=sys.stderr)
        return EXIT_NOT_FOUND if isinstance(err, FileNotFoundError) else EXIT_CANNOT_RUN
    return EXIT_ERROR  # not reached: exec replaced this process

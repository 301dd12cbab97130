"""``kmon run -- PROGRAM``: run an unmodified confluent-kafka program with kmon's agent."""

from __future__ import annotations

import argparse
import os

from kmon.cli.options import EXIT_ERROR
from kmon.errors import UserError


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``run`` arguments to ``parser``."""
    parser.add_argument("program", nargs=argparse.REMAINDER, help="-- command and arguments")


def run(args: argparse.Namespace) -> int:
    """Replace this process with the program, its clients instrumented."""
    from kmon.agent.autoinstrument import run_environment

    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        raise UserError("kmon run needs a program: kmon run -- python app.py")
    try:
        os.execvpe(program[0], program, run_environment(dict(os.environ)))
    except OSError as err:
        raise UserError(f"cannot run {program[0]}: {err.strerror}") from err
    return EXIT_ERROR  # not reached: exec replaced this process

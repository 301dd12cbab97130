"""A process's command line told in a word or two: the script, jar or main class it runs."""

from __future__ import annotations

import os
import re
import shlex
from functools import lru_cache

# launcher options that take the next argument as their value
_JAVA_VALUED = {"-cp", "-classpath", "--class-path", "-p", "--module-path", "--add-modules",
                "--add-opens", "--add-exports", "--add-reads", "-javaagent", "--limit-modules",
                "--upgrade-module-path", "--patch-module", "-splash"}
_PYTHON_VALUED = {"-W", "-X", "--check-hash-based-pycs"}
_NODE_VALUED = {"-r", "--require", "--import", "--loader", "--env-file", "--title"}
# command lines told: the screens ask for every process each refresh, and shlex is slow (the
# cache holds the strings the watched processes' views hold anyway, and those of a few gone)
MAX_TOLD = 256
_SUBCOMMAND = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,31}")  # a word, as a subcommand reads


@lru_cache(maxsize=MAX_TOLD)
def short_command(cmdline: str, name: str = "") -> str:
    """'python producer.py' -> 'producer.py'; 'python -m kmon.devtools.workload producer'
    -> 'workload producer'; 'java -cp … com.acme.Main' -> 'com.acme.Main'; 'python -c …'
    -> 'python'."""
    try:
        argv = shlex.split(cmdline)
    except ValueError:
        argv = cmdline.split()
    if not argv:
        return name
    program = os.path.basename(argv[0])
    rest = argv[1:]
    if program.startswith("python") or program == "pypy3":
        return _python_target(rest) or program
    if program == "java":
        return _java_target(rest) or program
    if program in ("node", "nodejs", "deno", "bun"):
        target, after = _first_plain(rest, _NODE_VALUED)
        return _with_subcommand(os.path.basename(target), after) if target else program
    return program or name


def _python_target(args: list[str]) -> str:
    """The module (its last name) or script, and its subcommand; "" for code given with
    ``-c`` or read from stdin (``-``): the interpreter's name says it best."""
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
        elif arg.startswith("-m"):
            module = arg[2:] or (args[i + 1] if i + 1 < len(args) else "")
            rest = args[i + 1:] if arg[2:] else args[i + 2:]
            return _with_subcommand(module.rsplit(".", 1)[-1], rest) if module else ""
        elif arg in ("-", "--") or arg.startswith("-c"):
            return ""
        elif arg.startswith("-"):
            skip = arg in _PYTHON_VALUED
        else:
            return _with_subcommand(os.path.basename(arg), args[i + 1:])
    return ""


def _java_target(args: list[str]) -> str:
    for i, arg in enumerate(args):
        if arg == "-jar" and i + 1 < len(args):
            return _with_subcommand(os.path.basename(args[i + 1]), args[i + 2:])
        if arg in ("-m", "--module") and i + 1 < len(args):
            return _with_subcommand(args[i + 1], args[i + 2:])
    target, rest = _first_plain(args, _JAVA_VALUED)
    return _with_subcommand(os.path.basename(target) if "/" in target else target, rest)


def _with_subcommand(target: str, rest: list[str]) -> str:
    """``target`` and the word after it when that reads as a subcommand (``workload
    producer``, ``kmon watch``), not an address, a path or a number."""
    return f"{target} {rest[0]}" if rest and _SUBCOMMAND.fullmatch(rest[0]) else target


def _first_plain(args: list[str], valued: set[str]) -> tuple[str, list[str]]:
    """The first argument that is neither an option nor an option's value, and those
    after it."""
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg.startswith("-"):
            skip = arg in valued
            continue
        return arg, args[i + 1:]
    return "", []

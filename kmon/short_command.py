"""A process's command line told in a word or two: the script, jar or main class it runs."""

from __future__ import annotations

import os
import shlex
from functools import lru_cache

# launcher options that take the next argument as their value
_JAVA_VALUED = {"-cp", "-classpath", "--class-path", "-p", "--module-path", "--add-modules",
                "--add-opens", "--add-exports", "--add-reads", "-javaagent", "--limit-modules",
                "--upgrade-module-path", "--patch-module", "-splash"}
_PYTHON_VALUED = {"-W", "-X", "-c", "--check-hash-based-pycs"}
_NODE_VALUED = {"-r", "--require", "--import", "--loader", "--env-file", "--title"}
# command lines told: the screens ask for every process each refresh, and shlex is slow (the
# cache holds the strings the watched processes' views hold anyway, and those of a few gone)
MAX_TOLD = 256


@lru_cache(maxsize=MAX_TOLD)
def short_command(cmdline: str, name: str = "") -> str:
    """'python producer.py' -> 'producer.py'; 'java -cp … com.acme.Main' -> 'com.acme.Main'."""
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
        return _first_plain(rest, _NODE_VALUED, basename=True) or program
    return program or name


def _python_target(args: list[str]) -> str:
    for i, arg in enumerate(args):
        if arg == "-m" and i + 1 < len(args):
            return f"-m {args[i + 1]}"
        if arg == "-c":
            return "-c …"
    return _first_plain(args, _PYTHON_VALUED, basename=True)


def _java_target(args: list[str]) -> str:
    for i, arg in enumerate(args):
        if arg == "-jar" and i + 1 < len(args):
            return os.path.basename(args[i + 1])
        if arg in ("-m", "--module") and i + 1 < len(args):
            return args[i + 1]
    target = _first_plain(args, _JAVA_VALUED, basename=False)
    return os.path.basename(target) if "/" in target else target


def _first_plain(args: list[str], valued: set[str], basename: bool) -> str:
    """The first argument that is neither an option nor an option's value."""
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg.startswith("-"):
            skip = arg in valued
            continue
        return os.path.basename(arg) if basename else arg
    return ""

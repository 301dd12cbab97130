"""Child processes that never outlive kmon (Ctrl-C, SIGTERM or SIGKILL of kmon included)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import tempfile

PR_SET_PDEATHSIG = 1
STDERR_TAIL_BYTES = 4096  # what a failed child's stderr shows, at most
# Python 3.11+: -P, no working directory on the module path (a clone named kmon beside it)
SAFE_PATH = ["-P"] if sys.version_info >= (3, 11) else []


def python_module(module: str, *args: str) -> list[str]:
    """``python -m module args`` that imports kmon as installed, never from the working
    directory (where a clone of kmon may sit)."""
    return [sys.executable, *SAFE_PATH, "-m", module, *args]


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """In a child before exec: ``sig`` when the parent dies (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)


class Spawned(subprocess.Popen[str]):
    """A child of ``spawn``: its stderr is kept in an unnamed file, open until ``stop_all``."""

    kmon_stderr: int | None = None


def spawn(argv: list[str], env: dict[str, str] | None = None) -> Spawned:
    """Start ``argv`` with piped stdout and its stderr kept in an unnamed file (for
    ``stderr_tail``); on Linux it gets SIGTERM when kmon dies. Python 3.10 has no -P: its
    children start in / so that no working directory is on their path."""
    with tempfile.TemporaryFile() as stderr:
        child = Spawned(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr,
                        text=True, env=env, cwd=None if SAFE_PATH else "/",
                        preexec_fn=die_with_parent if sys.platform.startswith("linux")
                        else None)
        child.kmon_stderr = os.dup(stderr.fileno())  # kept past this block, closed by stop_all
    return child


def stderr_tail(child: subprocess.Popen, lines: int = 5) -> str:
    """The last ``lines`` of what ``child`` wrote to stderr (at most STDERR_TAIL_BYTES)."""
    fd = getattr(child, "kmon_stderr", None)
    if fd is None:
        return ""
    size = os.fstat(fd).st_size
    text = os.pread(fd, STDERR_TAIL_BYTES, max(0, size - STDERR_TAIL_BYTES))
    return "\n".join(text.decode(errors="replace").strip().splitlines()[-lines:])


def stop_all(children: list[subprocess.Popen], grace_s: float = 5.0) -> None:
    """Terminate every child, then kill those that linger."""
    for child in children:
        if child.poll() is None:
            child.terminate()
    for child in children:
        try:
            child.wait(grace_s)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        if isinstance(child, Spawned) and child.kmon_stderr is not None:
            with contextlib.suppress(OSError):
                os.close(child.kmon_stderr)
            child.kmon_stderr = None

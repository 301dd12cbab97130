"""Child processes that never outlive kmon (Ctrl-C, SIGTERM or SIGKILL of kmon included)."""

from __future__ import annotations

import contextlib
import ctypes
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """In a child before exec: ``sig`` when the parent dies (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)


def spawn(argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``argv`` with piped stdout; on Linux it gets SIGTERM when kmon dies."""
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env,
                            preexec_fn=die_with_parent if sys.platform.startswith("linux")
                            else None)


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

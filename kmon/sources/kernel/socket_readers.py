"""The choice of socket reader: the fastest this host allows (netlink sock_diag on Linux,
psutil elsewhere or when netlink is refused)."""

from __future__ import annotations

import sys

from kmon.sources.kernel.psutil_sockets import PsutilSocketReader
from kmon.sources.kernel.sockdiag import SockDiagReader, SockDiagUnavailable
from kmon.sources.kernel.sockets import SocketReader


def open_socket_reader(prefer: str = "auto") -> SocketReader:
    """The socket reader to use: "auto", "sock_diag" or "psutil".

    "auto" picks netlink sock_diag on Linux and falls back to psutil when the
    kernel refuses it; "sock_diag" raises SockDiagUnavailable (an OSError)
    instead of falling back. Unknown names raise ValueError.
    """
    if prefer == "psutil" or (prefer == "auto" and not sys.platform.startswith("linux")):
        return PsutilSocketReader()
    if prefer not in ("auto", "sock_diag"):
        raise ValueError(f"unknown socket reader {prefer!r} (auto, sock_diag, psutil)")
    try:
        return SockDiagReader()
    except SockDiagUnavailable:
        if prefer == "sock_diag":
            raise
        return PsutilSocketReader()

"""How many TCP sockets the kernel holds (/proc/net/sockstat): a rough upper estimate of
what a sock_diag dump walks, whatever its filter."""

from __future__ import annotations

SOCKSTAT = "/proc/net/sockstat"
_READ_LIMIT = 4096  # the file is a few short lines


def tcp_sockets(path: str = SOCKSTAT) -> int:
    """The TCP sockets allocated in the kernel (both families, every network namespace,
    in its table of connections or not) plus this namespace's TIME_WAIT ones; 0 when the
    file cannot be read or says otherwise. A dump walks the one table of connections the
    namespaces share (fewer sockets where net.ipv4.tcp_child_ehash_entries gave this one
    its own)."""
    try:
        with open(path, "rb") as stats:
            text = stats.read(_READ_LIMIT)
    except OSError:
        return 0
    for line in text.splitlines():
        fields = line.split()
        if fields[:1] == [b"TCP:"]:
            counts = dict(zip(fields[1::2], fields[2::2], strict=False))
            try:
                return int(counts.get(b"alloc", 0)) + int(counts.get(b"tw", 0))
            except ValueError:
                return 0
    return 0

"""What the findings read of one poll (``Look``) and what each raises (``Raised``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kmon.evidence.findings.marks import Mark
from kmon.model import ConnectionLife, ProcessView


@dataclass(frozen=True)
class Look:
    """One poll's views, with each process's open-fd counts over the recent polls (oldest
    first, as (UTC epoch ms, count)), the soft limit on its open files, its recent marks
    (oldest first, this poll's last), and its connects that failed lately (the kernel's TCP
    events, oldest first)."""

    ts_ms: int
    views: Sequence[ProcessView]
    fds: Mapping[int, Sequence[tuple[int, int]]] = field(default_factory=dict)
    fd_limits: Mapping[int, int | None] = field(default_factory=dict)
    marks: Mapping[int, Sequence[Mark]] = field(default_factory=dict)
    failed_connects: Mapping[int, Sequence[ConnectionLife]] = field(default_factory=dict)
    short_closes: Mapping[int, Sequence[ConnectionLife]] = field(default_factory=dict)


@dataclass(frozen=True)
class Raised:
    """A finding for process ``pid``, not yet dated; ``key`` tells two of one reason in one
    process apart."""

    pid: int
    reason: str
    detail: str
    evidence: dict[str, Any]
    fix: str
    key: str = ""

"""Findings: kmon's diagnoses of a client process's trouble, each in a module of its own.

Each module's ``find(look)`` is a pure function of one poll's ``Look`` (the views and the
figures the engine gathered for them) returning what it raises; the engine
(kmon.engine.findings) dates each finding and carries it on its ProcessView. A new finding
is one more module and one more entry in ``FINDERS``.
"""

from __future__ import annotations

from kmon.evidence.findings import (
    advertised_unreachable,
    coordinator_flapping,
    duplicate_client_id,
    fd_near_limit,
    rebootstrap,
    silent_drop,
)
from kmon.evidence.findings.look import Look, Raised

__all__ = ["FINDERS", "Look", "Raised"]

FINDERS = (fd_near_limit.find, duplicate_client_id.find, silent_drop.find, rebootstrap.find,
           coordinator_flapping.find, advertised_unreachable.find)

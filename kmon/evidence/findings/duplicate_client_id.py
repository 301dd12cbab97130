"""``duplicate_client_id``: two or more client instances (in one process or several) using one
``client.id`` against one cluster.

A client.id a library made up (librdkafka's ``rdkafka``, Java's ``producer-1``) is left
alone: only one the user chose is a finding. Two users of an id are on one cluster when
their bootstrap servers or the brokers they reach meet.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kmon.evidence.findings.look import Look, Raised
from kmon.model import ClientInstance, ProcessView

REASON = "duplicate_client_id"
# the ids the clients make up when none is set: librdkafka's, and the Java client's
GENERATED = re.compile(r"rdkafka|(producer|consumer|adminclient)(-.+)?-\d+")
FIX = ("give each client instance a client.id of its own (the application's name with the "
       "host and an instance number, e.g. orders-app-host1-0): broker quotas, request logs "
       "and metrics are kept by client.id and lump these clients together, and the Java "
       "client's JMX MBeans of one id collide in one JVM")


@dataclass(frozen=True)
class User:
    """One client instance using an id: where it runs and what of the cluster it reaches."""

    view: ProcessView
    client: ClientInstance
    endpoints: frozenset[str]

    def words(self) -> str:
        return f"PID {self.view.pid} ({self.view.short_command}, {self.client.name})"


def chosen_id(client: ClientInstance) -> str | None:
    """The client.id the user set, or None where the library made it up."""
    if client.config.get("client.id"):
        return client.config["client.id"]
    cid = client.client_id
    return None if not cid or GENERATED.fullmatch(cid) else cid


def endpoints(view: ProcessView, client: ClientInstance) -> frozenset[str]:
    """The bootstrap servers it was given and the brokers its connections reach (those of
    the whole process when no connection names its client and it is the only one)."""
    servers = {s.strip() for s in client.config.get("bootstrap.servers", "").split(",")}
    own = {c.remote for c in view.connections if c.remote and c.client == client.name}
    if not own and len(view.clients) == 1:
        own = set(view.summary.remotes)
    return frozenset((servers | own) - {""})


def find(look: Look) -> list[Raised]:
    """Every user of an id shared with another on its cluster."""
    by_id: dict[str, list[User]] = {}
    for view in look.views:
        for client in view.clients:
            if (cid := chosen_id(client)) is not None:
                by_id.setdefault(cid, []).append(User(view, client, endpoints(view, client)))
    out = []
    for cid, users in by_id.items():
        for group in clusters(users):
            if len(group) > 1:
                out += _raised(cid, group)
    return out


def clusters(users: list[User]) -> list[list[User]]:
    """``users`` in groups of one cluster: those whose endpoints meet, transitively."""
    groups: list[tuple[set[str], list[User]]] = []
    for user in users:
        meeting = [g for g in groups if g[0] & user.endpoints]
        merged = (set(user.endpoints), [user])
        for group in meeting:
            merged[0].update(group[0])
            merged[1].extend(group[1])
            groups.remove(group)
        groups.append(merged)
    return [sorted(g[1], key=lambda u: (u.view.pid, u.client.name)) for g in groups]


def _raised(cid: str, group: list[User]) -> list[Raised]:
    pids = sorted({u.view.pid for u in group})
    where = (f"{len(pids)} processes" if len(pids) > 1
             else f"{len(group)} client instances of one process")
    named = ", ".join(u.words() for u in group)
    evidence = {"client_id": cid, "pids": pids,
                "clients": [{"pid": u.view.pid, "client": u.client.name,
                             "command": u.view.short_command} for u in group]}
    return [Raised(pid, REASON, f"client.id {cid!r} is used by {where} against one cluster: "
                   f"{named}", evidence, FIX, key=cid) for pid in pids]

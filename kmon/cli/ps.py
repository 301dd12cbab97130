"""``kmon ps``: every Kafka client process on this host, by cluster, as text or JSON (the host
view's rows, with no terminal needed)."""

from __future__ import annotations

import argparse
import sys

from kmon.cli import options, settle
from kmon.errors import UserError
from kmon.model import Snapshot
from kmon.present.plain_text import one_line

CONFIRM_WAIT_S = 2.5  # once settled, polls on while it learns brokers or asks them its cluster


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``ps`` arguments to ``parser``."""
    options.cluster(parser)
    options.config_file(parser)
    options.output(parser, "one row per process")
    options.wire(parser)
    settle.option(parser)


def run(args: argparse.Namespace) -> int:
    """Search the host, print the rows; exit 0, even with none."""
    from kmon.cli import wiring
    from kmon.cli.config import load_config
    from kmon.cli.json_lines import json_line
    from kmon.engine.facade import HostTarget, open_session

    config = load_config(args.config)
    named = wiring.named_cluster(args, config)
    try:
        cluster = wiring.cluster_state(named, args) if named else None
        session = open_session(HostTarget(cluster), wiring.engine_settings(
            args, config, named, cluster, require_kafka=False))
        try:
            snapshot, events = _look(session, args.settle)
            labels = session.cluster_labels(snapshot)
            if named is not None:
                labels = dict.fromkeys(session.of_cluster(snapshot, events), named.name)
            notices = list(session.notices)
        finally:
            session.close()
    except OSError as err:
        raise UserError(str(err)) from err
    rows = process_rows(snapshot, labels, events)
    for notice in notices:
        print(f"kmon ps: {one_line(notice)}", file=sys.stderr)
    fmt = options.output_format(args) or "table"
    if fmt == "json":
        sys.stdout.buffer.write(json_line({"ts_ms": snapshot.ts_ms, "host": snapshot.host,
                                           "processes": rows}))
    elif not rows and fmt != "tsv":  # a header alone reads as a failure
        of = f"of {one_line(named.name)} " if named is not None else ""
        print(f"no Kafka clients {of}on this host")
    else:
        sys.stdout.write("".join(f"{line}\n" for line in text_lines(rows, fmt)))
    sys.stdout.flush()
    return 0


def text_lines(rows: list[dict], fmt: str) -> list[str]:
    """``rows`` as text: wide and tsv with a cluster column; a table grouped under one line
    per cluster (its name and how many processes), so that the name is never cut."""
    from kmon.cli.text_table import render
    from kmon.present.columns import PROCESS_COLUMNS

    if fmt != "table":
        return render(rows, PROCESS_COLUMNS, fmt)
    header, *lines = render(rows, [c for c in PROCESS_COLUMNS if c.key != "cluster"], fmt)
    out = [header]
    for i, row in enumerate(rows):
        if i == 0 or row["cluster"] != rows[i - 1]["cluster"]:
            count = sum(r["cluster"] == row["cluster"] for r in rows)
            out.append(one_line(f"{row['cluster']} · {count} process{'es' * (count != 1)}"))
        out.append(lines[i])
    return out


def _look(session, settle_s: float) -> tuple[Snapshot, list]:
    """The settled look (kmon.cli.settle), and after it polls on, at most CONFIRM_WAIT_S, while
    the last poll learned a broker the one before did not know (the next finds its clients)
    or a process no answer has named the cluster of yet has brokers kmon's own Metadata
    queries are still asking, for CONFIRM_WAIT_S since a poll first found it so (the cluster
    labels come from their answers; one kmon cannot ask about holds no look longer)."""
    import time

    known: list[frozenset] = [frozenset()]  # the brokers known before the last poll
    since: dict[int, float] = {}  # a process waiting for its cluster -> since when
    searching: list[bool] = [False]

    def poll() -> tuple[Snapshot, list]:
        known[0] = session.known_brokers
        snapshot, events = session.poll()
        now = time.monotonic()
        waiting = session.clusters_asked(snapshot) - session.answered_clusters(snapshot).keys()
        since.update({pid: since.get(pid, now) for pid in waiting})
        searching[0] = session.known_brokers != known[0] or any(
            now - since[pid] < CONFIRM_WAIT_S for pid in waiting)
        return snapshot, events

    return settle.settled_look(poll, settle_s, waiting=lambda _: searching[0],
                               wait_s=CONFIRM_WAIT_S)


def process_rows(snapshot, labels: dict[int, str], events) -> list[dict]:
    """One row per process in ``labels`` (kmon.present.columns.PROCESS_COLUMNS' keys), in cluster
    order."""
    from kmon.engine.facade import owner
    from kmon.model import EventKind, Role
    from kmon.short_command import short_command

    churn = {e.pid: f"{e.churn.pattern.replace('_', ' ')} {e.churn.rate:g}/min"
             for e in events if e.kind is EventKind.CHURN and e.churn is not None}
    rows = []
    for view in snapshot.processes:
        if view.pid not in labels:
            continue
        summary = view.summary
        rows.append({
            "cluster": labels[view.pid], "pid": view.pid, "user": owner(view.pid),
            "command": short_command(view.cmdline, view.name),
            "client_ids": sorted({c.client_id for c in view.clients if c.client_id}),
            **{role.value: summary.roles[role] for role in Role},
            "close_wait": summary.close_wait, "max_idle_ms": summary.max_idle_ms,
            "clients_created": view.clients_created, "churn": churn.get(view.pid, ""),
            "findings": [f.to_dict() for f in view.findings], "cmdline": view.cmdline})
    return sorted(rows, key=lambda row: (row["cluster"], row["pid"]))

"""The matrix as a summary table (printed) and as markdown (docs/truth-matrix.md)."""

from __future__ import annotations

import subprocess

from benchmarks.truth.scenarios import SCENARIOS, Outcome
from benchmarks.truth.score import Tally

SHOWN = 6  # wrong verdicts listed per client
NOT_COVERED = (
    "Covered since issue 33: the Java client's own view, its NetworkClient DEBUG log (the node "
    "id each connection was initiated with, never given to kmon), decides the Java rows' "
    "roles, the requests the packets show a second matrix beside it; franz-go joins a "
    "KIP-848 group (`kip848-group/franz-go`, kgo.ServerSideBalancer). Not in the harness: "
    "the Java client's JMX node ids as an oracle (kmon reads them: not independent); "
    "kafka-python and KafkaJS in KIP-848 groups (neither has a KIP-848 consumer); the Java "
    "log's idle closes as a close oracle (no Java scenario reaps within its watch). "
    "librdkafka's re-bootstrap is measured inside broker-idle-reap (its `/bootstrap` "
    "sockets).")

HEADER = ("scenario", "client", "closes right/told", "wrong", "conf-wrong", "unsettled",
          "missed", "roles right/told", "wrong", "conf-wrong", "unsettled", "--once ≠ stream",
          "ps ≠ stream", "/metrics ≠ stream", "record ≠ stream")


def percent(tally: Tally) -> str:
    if not tally.told:
        return "0/0"
    return f"{tally.right}/{tally.told} ({100 * tally.right / tally.told:.0f}%)"


def summary_rows(outcomes: list[Outcome]) -> list[tuple[str, ...]]:
    rows = []
    for o in outcomes:
        if o.not_run:
            rows.append((o.scenario, o.client, f"not run: {o.not_run}", *[""] * 12))
            continue
        c, r, v = o.closes, o.roles, o.views
        once = v.get("once")
        once_text = (f"{once}/{v.get('once_sockets', 0)} sockets" if isinstance(once, int)
                     else f"not run: {once}")
        ps_text, metrics_text = (f"{v[k]} role counts" if isinstance(v.get(k), int)
                                 else f"not run: {v.get(k)}" for k in ("ps", "metrics"))
        if "metrics_closes" in v:  # of them, close kinds beyond the packets'
            closes = v["metrics_closes"]
            metrics_text = f"{v['metrics'] - closes} role counts, {closes} close kinds"
        record_text = (f"{v['record']}" if isinstance(v.get("record"), int)
                       else f"not run: {v.get('record')}")
        rows.append((o.scenario, o.client, percent(c), str(c.wrong), str(c.confident_wrong),
                     str(c.unsettled), str(c.missed), percent(r), str(r.wrong),
                     str(r.confident_wrong), str(r.unsettled), once_text, ps_text,
                     metrics_text, record_text))
    return rows


def totals(outcomes: list[Outcome]) -> dict[str, int]:
    ran = [o for o in outcomes if not o.not_run]
    tallies = [t for o in ran for t in (o.closes, o.roles)]
    return {"verdicts": sum(t.told for t in tallies), "right": sum(t.right for t in tallies),
            "confident_wrong": sum(t.confident_wrong for t in tallies),
            "unsettled": sum(t.unsettled for t in tallies),
            "view_disagreements": sum(v for o in ran for key, v in o.views.items()
                                      if key in ("once", "ps", "metrics", "record")
                                      and isinstance(v, int)),
            "not_run": len(outcomes) - len(ran)}


def text_table(outcomes: list[Outcome]) -> str:
    rows = [HEADER, *summary_rows(outcomes)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
                     for row in rows)


def matrix_markdown(title: str, tally: Tally) -> list[str]:
    truths = sorted({t for t, _ in tally.matrix})
    said = sorted({s for _, s in tally.matrix})
    if not truths:
        return [f"*{title}: none*", ""]
    lines = [f"*{title}* (rows: the oracle; columns: kmon)", "",
             "| oracle \\ kmon | " + " | ".join(said) + " |",
             "|---|" + "---|" * len(said)]
    for truth in truths:
        cells = [str(tally.matrix.get((truth, s), "")) for s in said]
        lines.append(f"| {truth} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def markdown(outcomes: list[Outcome], command: str) -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "kmon"], capture_output=True,
                           text=True).stdout.strip()
    total = totals(outcomes)
    share = 100 * total["right"] / total["verdicts"] if total["verdicts"] else 0.0
    lines = [
        "# kmon's verdicts against ground truth", "",
        f"Made on commit `{commit}`{' (kmon/ modified)' if dirty else ''} with `{command}` "
        "(benchmarks/truth/: how each oracle decides is in its modules' docstrings).", "",
        f"**Totals:** {total['right']} of {total['verdicts']} verdicts right ({share:.1f}%), "
        f"{total['unsettled']} unsettled, **{total['confident_wrong']} confidently wrong**, "
        f"{total['view_disagreements']} "
        f"view disagreements, {total['not_run']} scenario × client not run.", "",
        "A close is `side/reason`: the oracle's side is the first FIN or RST in the packet "
        "capture; a SYN answered by a RST is `-/connect_failed`. A close is confident "
        "unless kmon said `unknown`. A role is `role:node` from the client's own log: the "
        "librdkafka handle that made the socket (its debug log), the node id the Java client "
        "initiated it with (its NetworkClient DEBUG log; the requests the packets show it "
        "carried are a second matrix, and where the two oracles differ is listed); else from "
        "those requests. Confident at kmon's confidence ≥ 0.9. `told`: the "
        "verdicts kmon committed to; `unsettled` (kmon said unknown, or named no node) are "
        "counted apart, in neither right nor told. `missed`: "
        "closes of the client's sockets (by /proc, or its log: each connect or refused "
        "connect it logged claims one attempt, the nearest) that kmon never told. Views: "
        "sockets where `--once` names another role than the stream at "
        "the same moment; roles whose count `kmon ps` or the `kmon_connections` gauge of "
        "`kmon serve`'s /metrics gives otherwise, and close kinds (closed_by/reason) its "
        "`kmon_connections_closed_total` counts more of than the packets hold; closes and "
        "sockets whose last role "
        "`kmon record`'s Parquet tells otherwise than the stream, and closes only it told "
        "that it told otherwise than the packets.", "",
        NOT_COVERED, "",
        "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(row) + " |" for row in summary_rows(outcomes)]
    lines.append("")
    for o in outcomes:
        scenario = SCENARIOS.get(o.scenario)
        lines += [f"## {o.scenario} — {o.client}", "",
                  f"{scenario.title if scenario else ''}.", ""]
        if o.not_run:
            lines += [f"Not run: {o.not_run}", ""]
            continue
        notes = [*o.notes, *(f"`--once` ≠ stream: {d}" for d in o.views.get("once_detail", [])),
                 *(f"`ps` ≠ stream: {d}" for d in o.views.get("ps_detail", [])),
                 *(f"/metrics ≠ stream: {d}" for d in o.views.get("metrics_detail", [])),
                 *(f"recording ≠ stream: {d}" for d in o.views.get("record_detail", []))]
        lines += [f"* {note}" for note in notes] + ([""] if notes else [])
        lines += matrix_markdown("Closes (side/reason)", o.closes)
        lines += matrix_markdown("Roles (role:node)", o.roles)
        if o.roles_by_packets is not None:
            lines += matrix_markdown("Roles (role:node) by the requests the packets show, a "
                                     "cross-check of the client's log", o.roles_by_packets)
        wrongs = o.closes.wrongs + o.roles.wrongs
        if wrongs:
            shown = [f"* {w}" for w in wrongs[:SHOWN]]
            more = [f"* … and {len(wrongs) - SHOWN} more"] if len(wrongs) > SHOWN else []
            lines += ["Wrong verdicts:", "", *shown, *more, ""]
    return "\n".join(lines)

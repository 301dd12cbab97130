"""``kmon analyze`` on a real Spark session (local[2]) over a simulated fleet and a real
recording; ``kmon simulate-fleet``; the input checks.

Every analysis is checked against the simulator's ground truth and/or the same
quantity computed in plain Python over the same Parquet files.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from helpers import PER_MESSAGE, Child, assert_one_clear_line, kmon

from kmon.devtools.fleet_model import FleetSpec
from kmon.devtools.fleet_writer import simulate

pytest.importorskip("pyspark")

from kmon.analysis import inputs, jobs  # noqa: E402
from kmon.devtools import spark_cluster  # noqa: E402
from kmon.record import schema  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.spark]  # real processes, a cluster, Spark

FLEET = FleetSpec(hosts=2, clients=6, brokers=5, hours=0.75, interval_ms=2000,
                  close_wait_rate=0.3, churn_rate=0.5, per_message_rate=0.5, seed=7)


# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def fleet(tmp_path_factory) -> tuple[Path, dict]:
    """A simulated fleet's recording and its ground truth."""
    root = tmp_path_factory.mktemp("fleet")
    return root, simulate(FLEET, root)


@pytest.fixture(scope="session")
def results(fleet, spark_session) -> dict[str, pa.Table]:
    root, _ = fleet
    return jobs.run_all(inputs.load(spark_session, inputs.discover(root)), jobs.Params())


def read_rows(root: Path, table: str) -> list[dict]:
    """Every row of a table, with its ``host`` from the directory name, read with pyarrow."""
    rows = []
    for path in sorted((root / table).rglob("*.parquet")):
        if path.name.startswith("."):
            continue
        host = path.parent.name.partition("=")[2]
        rows += [{**row, "host": host} for row in pq.read_table(path).to_pylist()]
    return rows


def rows_of(table: pa.Table) -> list[dict]:
    return table.to_pylist()


def conn_id(row: dict) -> tuple:
    return row["session_id"], row["host"], row["pid"], row["key"]


def client_id(row: dict) -> tuple:
    return row["session_id"], row["host"], row["pid"], row["client"]


# -- the simulator -----------------------------------------------------------------------------


def test_the_simulator_is_deterministic_and_writes_schema_v1(tmp_path):
    spec = FleetSpec(hosts=1, clients=4, brokers=3, hours=0.2, interval_ms=5000, seed=3)
    first, second = simulate(spec, tmp_path / "a"), simulate(spec, tmp_path / "b")
    assert first == second
    for table in ("snapshots", "events", "sessions"):
        a, b = read_rows(tmp_path / "a", table), read_rows(tmp_path / "b", table)
        assert a == b and len(a) == first["rows"][table]
    found = inputs.discover(tmp_path / "a")
    assert not found.skipped and all(found.files[t] for t in ("snapshots", "events", "sessions"))
    assert simulate(FleetSpec(**{**spec.__dict__, "seed": 4}), tmp_path / "c") != first


def test_simulate_fleet_command_writes_the_truth(tmp_path):
    result = kmon("simulate-fleet", "--out", str(tmp_path / "rec"), "--hosts", "1",
                  "--clients", "3", "--brokers", "3", "--hours", "0.1", "--interval", "5s",
                  "--truth", str(tmp_path / "truth.json"))
    assert result.returncode == 0, result.stderr
    truth = json.loads((tmp_path / "truth.json").read_text())
    assert truth["rows"]["snapshots"] == len(read_rows(tmp_path / "rec", "snapshots")) > 0
    again = kmon("simulate-fleet", "--out", str(tmp_path / "rec"))
    assert again.returncode == 1 and "already holds a recording" in again.stderr


def test_the_fleet_exercises_every_analysis(fleet):
    _, truth = fleet
    assert sum(c["reap_cycles"] for c in truth["churn"]) > 0
    assert truth["close_wait"] and truth["coordinator_connections"]
    assert any(b["open_after_learned_ms"] >= 60_000 for b in truth["bootstrap"])
    assert any(c["brokers_connected"] > c["brokers_with_traffic"] for c in truth["clients"])


# -- the analyses against the truth and plain Python -------------------------------------------


def test_connections_by_role(fleet, results):
    root, _ = fleet
    conns: dict[tuple, set] = defaultdict(set)
    count: Counter = Counter()
    for row in read_rows(root, "snapshots"):
        for scope, host in (("host", row["host"]), ("fleet", None)):
            key = (scope, host, row["role"], row["state"], row["client_type"])
            conns[key].add(conn_id(row))
            count[key] += 1
    expected = {key: (len(ids), count[key]) for key, ids in conns.items()}
    got = {(r["scope"], r["host"], r["role"], r["state"], r["client_type"]):
           (r["connections"], r["snapshot_rows"]) for r in rows_of(results["connections_by_role"])}
    assert got == expected
    assert ("fleet", None, "broker", "CLOSE_WAIT", "consumer") in got


def test_peak_connections(fleet, results):
    root, _ = fleet
    per_poll: dict[tuple, dict[int, set]] = defaultdict(lambda: defaultdict(set))
    for row in read_rows(root, "snapshots"):
        per_poll[client_id(row)][row["ts_ms"]].add(row["key"])
    expected = {}
    for client, polls in per_poll.items():
        peak = max(len(keys) for keys in polls.values())
        when = min(ts for ts, keys in polls.items() if len(keys) == peak)
        mean = round(sum(len(k) for k in polls.values()) / len(polls), 3)
        expected[client] = (len(polls), peak, when, mean)
    got = {client_id(r): (r["polls"], r["peak_connections"], r["peak_ts"], r["mean_connections"])
           for r in rows_of(results["peak_connections"])}
    assert got == expected


def test_connections_over_time(fleet, results):
    root, _ = fleet
    rows = read_rows(root, "snapshots")
    first, last = min(r["ts_ms"] for r in rows), max(r["ts_ms"] for r in rows)
    width = 1000 * max(1, math.ceil((last - first + 1) / jobs.Params().time_buckets / 1000))
    conns: dict[tuple, set] = defaultdict(set)
    for row in rows:
        conns[(row["ts_ms"] // width * width, row["role"])].add(conn_id(row))
    got = {(r["bucket_ts"], r["role"]): r["connections"]
           for r in rows_of(results["connections_over_time"])}
    assert got == {key: len(ids) for key, ids in conns.items()}
    assert {r["bucket_ms"] for r in rows_of(results["connections_over_time"])} == {width}


def test_bootstrap_outlived(fleet, results):
    _, truth = fleet
    expected = {(b["session_id"], b["host"], b["pid"], b["key"]): b["open_after_learned_ms"]
                for b in truth["bootstrap"] if b["open_after_learned_ms"] >= 60_000}
    got = {conn_id(r): r["open_after_learned_ms"]
           for r in rows_of(results["bootstrap_outlived"])}
    assert got == expected
    assert all(r["node_id"] < 0 for r in rows_of(results["bootstrap_outlived"]))


def test_idle_churn_and_reap_cycles(fleet, results):
    _, truth = fleet
    expected = {(c["session_id"], c["host"], c["pid"], c["client"], c["role"], c["broker_id"]):
                (c["idle_churned"], c["reap_cycles"]) for c in truth["churn"]}
    got = {(*client_id(r), r["role"], r["broker_id"]): (r["idle_churned"], r["reap_cycles"])
           for r in rows_of(results["idle_churn"])}
    assert got == expected
    cycling = [r for r in rows_of(results["idle_churn"]) if r["reap_cycles"]]
    assert all(r["mean_reopen_gap_ms"] <= 300_000 + 30_000 for r in cycling)
    assert all(abs(r["mean_idle_lifetime_ms"] - 540_000) <= 30_000 for r in cycling)


def test_fanout_waste(fleet, results):
    _, truth = fleet
    expected = {client_id(c): (c["brokers_connected"], c["brokers_with_traffic"],
                               c["brokers_connected"] - c["brokers_with_traffic"],
                               c["brokers_reaped"], 0) for c in truth["clients"]}
    got = {client_id(r): (r["brokers_connected"], r["brokers_with_traffic"],
                          r["brokers_idle_only"], r["brokers_reaped"],
                          r["brokers_traffic_unknown"])
           for r in rows_of(results["fanout_waste"])}
    assert got == expected


def test_close_wait_exposure(fleet, results):
    _, truth = fleet
    expected = {(c["session_id"], c["host"], c["pid"], c["key"]):
                (c["client"], c["broker_id"], c["first_ts"], c["last_ts"], c["close_wait_ms"])
                for c in truth["close_wait"]}
    got = {conn_id(r): (r["client"], r["broker_id"], r["first_close_wait_ts"],
                        r["last_close_wait_ts"], r["close_wait_ms"])
           for r in rows_of(results["close_wait"])}
    assert got == expected
    assert all(r["resolved"] for r in rows_of(results["close_wait"]))


def test_coordinator_load_uses_the_latest_session_row(fleet, results):
    _, truth = fleet
    expected: dict[int, list] = defaultdict(lambda: [0, set(), set()])
    for c in truth["coordinator_connections"]:
        entry = expected[c["broker_id"]]
        entry[0] += 1
        entry[1].add(client_id(c))
        entry[2].add(c["group"])
    got = {r["broker_id"]: (r["coordinator_connections"], r["clients"], r["group_ids"],
                            r["clients_without_group"])
           for r in rows_of(results["coordinator_load"])}
    assert got == {broker: (n, len(clients), ",".join(sorted(groups)), 0)
                   for broker, (n, clients, groups) in expected.items()}


def test_latest_sessions_take_the_stopped_row(fleet, spark_session):
    root, _ = fleet
    sessions = inputs.load(spark_session, inputs.discover(root)).sessions
    assert sessions.count() == 2 * FLEET.hosts  # a row at start, one at stop
    latest = jobs.latest_sessions(sessions).toArrow()
    assert latest.num_rows == FLEET.hosts
    assert latest["stopped_ms"].to_pylist() == [FLEET.start_ms + 45 * 60_000] * FLEET.hosts


def test_idle_age(fleet, results):
    root, _ = fleet
    rows: Counter = Counter()
    conns: dict[tuple, set] = defaultdict(set)
    bins = jobs.Params().idle_bins
    for row in read_rows(root, "snapshots"):
        key = (row["role"], min(row["idle_ms"] * bins // row["idle_limit_ms"], bins))
        rows[key] += 1
        conns[key].add(conn_id(row))
    got = {(r["role"], r["bin"]): (r["rows"], r["connections"])
           for r in rows_of(results["idle_age"])}
    assert got == {key: (n, len(conns[key])) for key, n in rows.items()}
    assert any(b == bins for _, b in got)  # the CLOSE_WAIT and reaped tail past the limit


def test_event_counts(fleet, results):
    root, _ = fleet
    events: Counter = Counter()
    conns: dict[tuple, set] = defaultdict(set)
    for row in read_rows(root, "events"):
        key = (row["host"], row["kind"], row["role"])
        events[key] += 1
        conns[key].add((row["session_id"], row["pid"], row["key"]))
    got = {(r["host"], r["kind"], r["role"]): (r["events"], r["connections"])
           for r in rows_of(results["event_counts"])}
    assert got == {key: (n, len(conns[key])) for key, n in events.items()}


def test_why_connections_closed(fleet, results):
    _, truth = fleet
    expected: Counter = Counter()
    for c in truth["closes"]:
        expected[(c["host"], c["broker_id"], c["closed_by"], c["reason"])] += c["closes"]
    got = {(r["host"], r["broker_id"], r["closed_by"], r["reason"]): r["closes"]
           for r in rows_of(results["why_closed"])}
    assert got == dict(expected)
    assert {"client_idle_reap", "broker_idle_reap", "broker_closed", "client_closed"} <= {
        reason for _, _, _, reason in got}
    java_reaps = [r for r in rows_of(results["why_closed"]) if r["reason"] == "client_idle_reap"]
    assert all(abs(r["median_idle_before_ms"] - 540_000) <= 1_000 for r in java_reaps)


def test_churn_and_leaks(fleet, results):
    root, truth = fleet
    events = read_rows(root, "events")
    rows = {(r["host"], r["pid"]): r for r in rows_of(results["churn_and_leaks"])}
    suspects = {(e["host"], e["pid"]) for e in truth["churn_events"]
                if e["pattern"] == "client_per_message"}
    assert suspects and {k for k, r in rows.items() if r["suspect"]} == suspects
    cycles = Counter((e["host"], e["pid"]) for e in truth["churn_events"]
                     if e["pattern"] == "idle_reap_cycle")
    assert {k: r["idle_reap_cycle"] for k, r in rows.items() if r["idle_reap_cycle"]} == cycles
    opened = Counter((e["host"], e["pid"]) for e in events if e["kind"] == "opened")
    assert {k: r["opened"] for k, r in rows.items() if r["opened"]} == dict(opened)
    # the suspects sort first: what an operator should look at
    assert all(r["suspect"] for r in rows_of(results["churn_and_leaks"])[:len(suspects)])


def as_version(fleet_root: Path, target: Path, version: int) -> None:
    """A copy of the fleet's recording as schema ``version`` wrote it (no lives table)."""
    shutil.copytree(fleet_root, target)
    shutil.rmtree(target / "lives", ignore_errors=True)
    added = [*(schema.ADDED_IN_V2["events"] if version == 1 else ()),
             *schema.ADDED_IN_V3["events"]]
    for path in (target / "events").rglob("*.parquet"):
        table = pq.read_table(path).drop_columns(added)
        column = table.schema.get_field_index("schema_version")
        pq.write_table(table.set_column(column, "schema_version",
                                        pa.array([version] * table.num_rows, pa.int32())), path)


def test_a_version_1_recording_is_still_read(fleet, spark_session, tmp_path):
    """Version 1 events lack the close and churn columns: read as nulls, counted unknown."""
    as_version(fleet[0], tmp_path / "v1", 1)
    found = inputs.discover(tmp_path / "v1")
    assert found.skipped == []
    frames = inputs.load(spark_session, found)
    closes = jobs.why_closed(frames.events).toArrow().to_pylist()
    assert {(r["closed_by"], r["reason"]) for r in closes} == {("unknown", "unknown")}
    assert sum(r["closes"] for r in closes) == sum(c["closes"] for c in fleet[1]["closes"])


def test_a_version_2_recording_is_still_read(fleet, spark_session, tmp_path, results):
    """Version 2 events lack the exact times and it has no lives: churn from the polls."""
    as_version(fleet[0], tmp_path / "v2", 2)
    found = inputs.discover(tmp_path / "v2")
    assert found.skipped == [] and found.files["lives"] == []
    frames = inputs.load(spark_session, found)
    churn = jobs.churn_and_leaks(frames.events, frames.lives, jobs.Params()).toArrow()
    assert {r["counted"] for r in churn.to_pylist()} == {"polls"}
    keys = [(k, "ascending") for k in ("session_id", "host", "pid")]
    assert churn.sort_by(keys).equals(results["churn_and_leaks"].sort_by(keys))


@pytest.mark.parametrize("name", ["rec", "rec[1]{a,b}"])
def test_spark_reads_exactly_the_checked_files_whatever_their_names(fleet, spark_session,
                                                                   tmp_path, name):
    """A checked file named ``sim*.parquet`` beside a skipped ``simBAD.parquet`` (of a
    schema version kmon does not read), in a recording whose own directory may have glob
    characters too: Spark reads the checked file's rows and none of the skipped one's."""
    root = tmp_path / name
    shutil.copytree(fleet[0], root)
    good = sorted((root / "snapshots").rglob("*.parquet"))[0]
    good.rename(good.with_name("sim*.parquet"))
    table = pq.read_table(good.with_name("sim*.parquet"))
    version = table.schema.get_field_index("schema_version")
    pq.write_table(table.set_column(version, "schema_version", pc.add(table["schema_version"], 3)),
                   good.with_name("simBAD.parquet"))
    found = inputs.discover(root)
    assert [s.path.name for s in found.skipped] == ["simBAD.parquet"]
    checked = sum(pq.read_metadata(f).num_rows for f in found.files["snapshots"])
    assert inputs.load(spark_session, found).snapshots.count() == checked


def test_only_the_top_rows_of_each_result_reach_the_driver(fleet, spark_session, results):
    """``max_rows`` 3: each result holds its first 3 rows of the whole sorted result, says
    how many the whole had, and the terminal's caption says so."""
    from kmon.analysis import report

    kept = jobs.run_all(inputs.load(spark_session, inputs.discover(fleet[0])), jobs.Params(), 3)
    cut = [name for name, table in results.items() if table.num_rows > 3]
    assert len(cut) >= 5
    for analysis in jobs.ANALYSES:
        table, whole = kept[analysis.name], results[analysis.name]
        assert table.num_rows == min(3, whole.num_rows)
        assert jobs.total_rows(table) == whole.num_rows
        assert all(row in rows_of(whole) for row in rows_of(table))
        caption = report.renderable(analysis, table, 10).caption
        assert f"of {whole.num_rows:,} rows" in str(caption) or whole.num_rows <= 3


# -- bad input ---------------------------------------------------------------------------------


def spoil(fleet_root: Path, target: Path) -> dict[str, Path]:
    """A copy of the fleet with a truncated file, a schema-v4 file, a file of other
    columns, a stray file outside the layout, and a hidden writer leftover."""
    shutil.copytree(fleet_root, target)
    good = sorted((target / "snapshots").rglob("*.parquet"))[0]
    table = pq.read_table(good)
    bad = {"truncated": good.with_name("truncated-000001.parquet"),
           "future": good.with_name("future-000001.parquet"),
           "columns": good.with_name("other-000001.parquet"),
           "layout": target / "snapshots" / "stray.parquet"}
    data = good.read_bytes()
    bad["truncated"].write_bytes(data[: len(data) // 2])
    version = table.schema.get_field_index("schema_version")
    pq.write_table(table.set_column(version, "schema_version",
                                    pc.add(table["schema_version"], 1)), bad["future"])
    pq.write_table(table.drop_columns(["confidence"]), bad["columns"])
    pq.write_table(table, bad["layout"])
    good.with_name(".half-written.parquet.tmp").write_bytes(data[:100])
    return bad


def test_bad_files_are_skipped_with_the_reason(fleet, tmp_path):
    bad = spoil(fleet[0], tmp_path / "mixed")
    found = inputs.discover(tmp_path / "mixed")
    reasons = {s.path: s.reason for s in found.skipped}
    assert set(reasons) == set(bad.values())
    assert "truncated or corrupt" in reasons[bad["truncated"]]
    readable = " or ".join(map(str, schema.READABLE_VERSIONS))
    assert reasons[bad["future"]] == (f"schema_version {schema.SCHEMA_VERSION + 1}, "
                                      f"expected {readable}")
    assert "missing confidence" in reasons[bad["columns"]]
    assert "layout" in reasons[bad["layout"]]
    assert found.files == {table: [tmp_path / "mixed" / p.relative_to(fleet[0]) for p in files]
                           for table, files in inputs.discover(fleet[0]).files.items()}


@pytest.mark.parametrize("case", ["missing", "empty", "file"])
def test_nothing_to_analyse_is_one_clear_line(case, tmp_path):
    path = tmp_path / "rec"
    if case == "empty":
        path.mkdir()
    elif case == "file":
        path.write_text("not a directory")
    assert_one_clear_line(kmon("analyze", str(path)), 1, "kmon: error", str(path))


def test_no_readable_snapshots_names_the_bad_file_then_stops(tmp_path):
    junk = tmp_path / "snapshots" / "date=2026-01-01" / "host=a" / "x.parquet"
    junk.parent.mkdir(parents=True)
    junk.write_text("junk")
    result = kmon("analyze", str(tmp_path))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    warning, error = result.stderr.strip().splitlines()
    assert warning.startswith(f"kmon: warning: skipped {junk}: not a readable Parquet file")
    assert error == f"kmon: error: no readable snapshot files under {tmp_path}"


# -- the command line, once, on a Spark standalone cluster ------------------------------------


@pytest.fixture(scope="module")
def standalone_run(fleet, tmp_path_factory):
    """``kmon analyze`` of the fleet mixed with bad files, on a master with a two-core worker
    on this machine (stopped after the run): (its result, its --out, the bad files). Two
    one-core executors and several shuffle partitions; one JVM launch serves the tests
    below."""
    root = tmp_path_factory.mktemp("standalone")
    bad = spoil(fleet[0], root / "mixed")
    settings = {**spark_cluster.DRIVER_CONF, "spark.sql.shuffle.partitions": "3",
                "spark.executor.cores": "1"}
    conf = [arg for key, value in settings.items() for arg in ("--conf", f"{key}={value}")]
    with spark_cluster.standalone(workers=1, cores=2, memory="2g") as url:
        result = kmon("analyze", str(root / "mixed"), "--out", str(root / "out"), "--master",
                      url, *conf, timeout=240)
    return result, root / "out", bad


def test_cli_end_to_end_skips_bad_files_and_writes_every_output(standalone_run):
    result, out, bad = standalone_run
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    for path in bad.values():
        assert f"kmon: warning: skipped {path}:" in result.stderr
    for analysis in jobs.ANALYSES:
        assert (out / f"{analysis.name}.csv").stat().st_size > 0
        assert analysis.title in result.stdout
    for chart in ("connections_over_time", "churn_per_broker", "idle_age", "why_closed",
                  "churn"):
        assert (out / f"{chart}.png").read_bytes().startswith(b"\x89PNG")
        assert b"<svg" in (out / f"{chart}.svg").read_bytes()[:1000]


def test_a_standalone_cluster_finds_what_local_mode_finds(standalone_run, results):
    """Every table equals local[2]'s over the good files alone: the bad files changed
    nothing, and neither did two executors."""
    result, out, _ = standalone_run
    assert result.returncode == 0, result.stderr
    for analysis in jobs.ANALYSES:
        written = pq.read_table(out / f"{analysis.name}.parquet")
        assert written.equals(results[analysis.name]), analysis.name


def test_a_file_corrupt_past_its_footer_fails_in_one_line_naming_it(fleet, tmp_path):
    shutil.copytree(fleet[0], tmp_path / "rec")
    victim = sorted((tmp_path / "rec" / "snapshots").rglob("*.parquet"))[0]
    data = bytearray(victim.read_bytes())
    data[200: len(data) // 2] = b"\xab" * (len(data) // 2 - 200)  # pages gone, footer intact
    victim.write_bytes(bytes(data))
    assert not inputs.discover(tmp_path / "rec").skipped  # the cheap check can't see it
    result = kmon("analyze", str(tmp_path / "rec"), "--master", "local[2]", timeout=240)
    assert_one_clear_line(result, 1, "kmon: error: Spark failed", str(victim))


# -- a real recording --------------------------------------------------------------------------


def test_a_real_recording_of_a_consumer(start_client, spark_session, tmp_path):
    consumer = start_client("consumer")
    recorded = kmon("record", "--pid", str(consumer.pid), "--out", str(tmp_path / "rec"),
                    "--interval", "250ms", "--duration", "3s")
    assert recorded.returncode == 0, recorded.stderr
    found = inputs.discover(tmp_path / "rec")
    assert not found.skipped and found.files["snapshots"]
    tables = jobs.run_all(inputs.load(spark_session, found), jobs.Params())
    conns: dict[tuple, set] = defaultdict(set)
    for row in read_rows(tmp_path / "rec", "snapshots"):
        conns[(row["role"], row["state"])].add(conn_id(row))
    fleet_rows = [r for r in rows_of(tables["connections_by_role"]) if r["scope"] == "fleet"]
    assert {(r["role"], r["state"]): r["connections"] for r in fleet_rows} == \
        {key: len(ids) for key, ids in conns.items()}
    assert {"coordinator", "broker"} <= {r["role"] for r in fleet_rows}
    (peak,) = [r for r in rows_of(tables["peak_connections"]) if r["client"]]
    assert peak["pid"] == consumer.pid and peak["peak_connections"] >= 2
    coordinators = rows_of(tables["coordinator_load"])
    assert [r["coordinator_connections"] for r in coordinators] == [1]
    assert coordinators[0]["groups"] == 1  # group.id from the session's clients_json


@pytest.mark.root(reason="the kernel's TCP events need root")
def test_churn_is_ranked_from_the_kernel_s_exact_counts(cluster, start_client, spark_session,
                                                        tmp_path):
    steady = start_client("consumer")
    maker = Child([sys.executable, "-c", PER_MESSAGE, cluster])  # no agent, no poll sees them
    try:
        maker.wait_line("SENT")
        recorded = kmon("record", "--pid", str(maker.pid), "--pid", str(steady.pid), "--out",
                        str(tmp_path / "rec"), "--interval", "1s", "--duration", "6s")
    finally:
        maker.stop()
    assert recorded.returncode == 0, recorded.stderr
    found = inputs.discover(tmp_path / "rec")
    assert not found.skipped and found.files["lives"]
    lives = read_rows(tmp_path / "rec", "lives")
    frames = inputs.load(spark_session, found)
    rows = jobs.churn_and_leaks(frames.events, frames.lives, jobs.Params()).toArrow().to_pylist()
    ranked = sorted(rows, key=lambda r: -r["opened_per_minute"])
    assert ranked[0]["pid"] == maker.pid and ranked[0]["counted"] == "kernel"
    assert ranked[0]["opened"] == sum(r["pid"] == maker.pid for r in lives) >= 10
    assert all(r["schema_version"] == schema.SCHEMA_VERSION and r["closed_ms"] >= r["opened_ms"]
               for r in lives)
    assert not [r for r in rows if r["pid"] == steady.pid and r["opened"] > 3], rows

"""The fleet analyses: each one a function from the recording's DataFrames to one DataFrame.

Exact definitions and output columns are in docs/analysis.md. Throughout:

* a **connection** is ``(session_id, host, pid, key)``; a **client** is
  ``(session_id, host, pid, client)`` (``client`` null: the process's sockets
  that no client metric explains); a **process** is ``(session_id, host, pid)``;
* a connection's **lifetime** runs from the first to the last poll that saw it;
  it was *opened while observed* when its process had been seen at an earlier
  poll, and *closed while observed* when its process was seen at a later poll;
* it **carried traffic** when its ``requests_sent`` grew by more than
  ``HANDSHAKE_REQUESTS`` over its polls (when the client's request counts are
  unknown: its ``bytes_sent`` by more than ``HANDSHAKE_BYTES``; unknown when
  neither is known);
* ``*_ts`` columns are UTC epoch milliseconds, other ``*_ms`` columns durations.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from kmon.analysis.inputs import Frames
from kmon.classify import HANDSHAKE_REQUESTS, JAVA_CLIENT_IDLE_MS
from kmon.engine.closes import IDLE_REASONS
from kmon.tcp_state import TcpState

PROCESS = ("session_id", "host", "pid")
CONNECTION = (*PROCESS, "key")
CLIENT = (*PROCESS, "client")
ATTRIBUTES = ("client", "client_id", "client_type", "role", "node_id", "broker_id", "remote")
OWNER = ("client", "client_id", "client_type")
LINKED_ROLES = ("broker", "coordinator")  # the roles of a client that has learned the cluster
HANDSHAKE_BYTES = 2048
CONCURRENT_JOBS = 4
CLIENTS_JSON = "array<struct<pid:bigint,name:string,config:map<string,string>>>"
CHURN_PATTERNS = ("client_per_message", "idle_reap_cycle", "reconnect_storm", "fd_leak")
MAX_ROWS = 10_000  # rows of one result brought to the driver unless asked for more
TOTAL_ROWS = b"kmon.total_rows"  # a kept table's schema metadata: the rows the result had


@dataclass(frozen=True)
class Params:
    """The knobs of the analyses (``kmon analyze`` options)."""

    bootstrap_outlived_ms: int = 60_000
    metadata_max_age_ms: int = 300_000  # when a client's config doesn't say
    idle_limit_ms: int = JAVA_CLIENT_IDLE_MS  # when the rows don't say
    tolerance_ms: int = 30_000  # must exceed two poll intervals
    idle_bins: int = 20
    time_buckets: int = 200
    short_lived_ms: int = 5_000  # a connection closed within this is short-lived


def _distinct(*columns: str | Column) -> Column:
    """Count of distinct combinations (nulls included, unlike countDistinct of columns)."""
    return F.countDistinct(F.struct(*columns))


def _flag_count(condition: Column) -> Column:
    return F.count(F.when(condition, True))


# -- shared building blocks ---------------------------------------------------------------


def latest_sessions(sessions: DataFrame) -> DataFrame:
    """One row per session_id: the one with the latest ``stopped_ms`` (nulls last)."""
    order = Window.partitionBy("session_id").orderBy(
        F.col("stopped_ms").desc_nulls_last(), F.col("started_ms").desc_nulls_last(),
        F.length("clients_json").desc_nulls_last())
    return (sessions.withColumn("_rank", F.row_number().over(order))
            .filter(F.col("_rank") == 1).drop("_rank"))


def client_configs(sessions: DataFrame) -> DataFrame:
    """(session_id, pid, client) -> group_id, metadata_max_age_ms, from the sessions'
    clients_json."""
    entries = latest_sessions(sessions).select(
        "session_id", F.explode(F.from_json("clients_json", CLIENTS_JSON)).alias("c"))
    return (entries.select(
        "session_id", F.col("c.pid").cast("int").alias("pid"), F.col("c.name").alias("client"),
        F.col("c.config").getItem("group.id").alias("group_id"),
        F.col("c.config").getItem("metadata.max.age.ms").cast("bigint")
        .alias("metadata_max_age_ms"))
        .groupBy("session_id", "pid", "client")
        .agg(F.max("group_id").alias("group_id"),
             F.max("metadata_max_age_ms").alias("metadata_max_age_ms")))


def connection_stretches(snapshots: DataFrame) -> DataFrame:
    """One row per connection, attribute values and TCP state (one or a few per
    connection): first/last poll, polls, first poll in a linked role, request and byte
    range, idle limit. The one pass over every snapshot row that most analyses share; a
    hash aggregation with numeric buffers only."""
    linked = F.col("role").isin(*LINKED_ROLES)
    return snapshots.groupBy(*CONNECTION, *ATTRIBUTES, "state").agg(
        F.min("ts_ms").alias("first_seen_ts"), F.max("ts_ms").alias("last_seen_ts"),
        F.count("*").alias("polls"),
        F.min(F.when(linked, F.col("ts_ms"))).alias("first_linked_ts"),
        F.min("requests_sent").alias("requests_min"), F.max("requests_sent").alias("requests_max"),
        F.min("bytes_sent").alias("bytes_min"), F.max("bytes_sent").alias("bytes_max"),
        F.max("idle_limit_ms").alias("idle_limit_ms"))


def connection_lifetimes(stretches: DataFrame) -> DataFrame:
    """One row per connection: its owner (at the last poll that named one: a client's first
    polls, before its metrics, name none), role and broker (at its last poll), first/last
    poll, first poll in a linked role, request and byte growth, its process's first/last
    poll, and the flags opened_observed, closed_observed, carried_traffic."""
    named = F.when(F.col("client").isNotNull(), F.col("last_seen_ts"))
    conns = stretches.groupBy(*CONNECTION).agg(
        *(F.max_by(c, named if c in OWNER else "last_seen_ts").alias(c) for c in ATTRIBUTES),
        F.min("first_seen_ts").alias("first_seen_ts"), F.max("last_seen_ts").alias("last_seen_ts"),
        F.sum("polls").alias("polls"), F.min("first_linked_ts").alias("first_linked_ts"),
        (F.max("requests_max") - F.min("requests_min")).alias("requests_delta"),
        (F.max("bytes_max") - F.min("bytes_min")).alias("bytes_delta"),
        F.max("idle_limit_ms").alias("idle_limit_ms"))
    spans = conns.groupBy(*PROCESS).agg(F.min("first_seen_ts").alias("process_first_ts"),
                                        F.max("last_seen_ts").alias("process_last_ts"))
    requests, sent = F.col("requests_delta"), F.col("bytes_delta")
    traffic = (F.when(requests.isNotNull(), requests > HANDSHAKE_REQUESTS)
               .when(sent.isNotNull(), sent > HANDSHAKE_BYTES))
    return (conns.join(spans, list(PROCESS))
            .withColumn("opened_observed", F.col("first_seen_ts") > F.col("process_first_ts"))
            .withColumn("closed_observed", F.col("last_seen_ts") < F.col("process_last_ts"))
            .withColumn("carried_traffic", traffic))


def client_attributes(lifetimes: DataFrame) -> DataFrame:
    """Per client: its client_id and client_type as its latest connection shows them."""
    return lifetimes.groupBy(*CLIENT).agg(
        *(F.max_by(c, "last_seen_ts").alias(c) for c in ("client_id", "client_type")))


def _linked(lifetimes: DataFrame) -> DataFrame:
    return lifetimes.filter(F.col("role").isin(*LINKED_ROLES) & F.col("broker_id").isNotNull())


# -- 1. connections by role, state and client type; peaks ------------------------------------


def connections_by_role(stretches: DataFrame) -> DataFrame:
    """Distinct connections (and snapshot rows) per role, TCP state and client type, per
    host (scope "host") and fleet-wide (scope "fleet", host null)."""
    keys = ("role", "state", "client_type")
    per_connection = stretches.groupBy(*keys, *CONNECTION).agg(F.sum("polls").alias("rows"))
    measures = (F.count("*").alias("connections"), F.sum("rows").alias("snapshot_rows"))
    per_host = (per_connection.groupBy("host", *keys).agg(*measures)
                .withColumn("scope", F.lit("host")))
    fleet = (per_connection.groupBy(*keys).agg(*measures).withColumn("scope", F.lit("fleet"))
             .withColumn("host", F.lit(None).cast("string")))
    return per_host.unionByName(fleet).select("scope", "host", *keys, "connections",
                                              "snapshot_rows")


def peak_connections(snapshots: DataFrame, lifetimes: DataFrame) -> DataFrame:
    """Per client: the most connections it held at one poll, when (first such poll), and
    its mean over the polls that saw it. A snapshot holds one row per connection (its key
    is unique within its process), so rows are counted, not keys; each counts for the
    client that owns its connection (``connection_lifetimes``), not for "no client" in the
    polls before the client's metrics came."""
    owners = lifetimes.select(*CONNECTION, "client")
    per_poll = (snapshots.select(*CONNECTION, "ts_ms").join(owners, list(CONNECTION))
                .groupBy(*CLIENT, "ts_ms").agg(F.count("*").alias("n")))
    peak = F.max(F.struct(F.col("n"), (-F.col("ts_ms")).alias("earlier")))
    peaks = per_poll.groupBy(*CLIENT).agg(F.count("*").alias("polls"), peak.alias("peak"),
                                          F.round(F.avg("n"), 3).alias("mean_connections"))
    return (peaks.join(client_attributes(lifetimes), list(CLIENT), "left")
            .select(*CLIENT, "client_id", "client_type", "polls",
                    F.col("peak.n").alias("peak_connections"),
                    (-F.col("peak.earlier")).alias("peak_ts"), "mean_connections"))


def recording_span(lifetimes: DataFrame) -> tuple[int | None, int | None]:
    """The first and last poll of the recording."""
    row = lifetimes.agg(F.min("first_seen_ts"), F.max("last_seen_ts")).first()
    return (row[0], row[1]) if row is not None else (None, None)


def connections_over_time(snapshots: DataFrame, span: tuple[int | None, int | None],
                          buckets: int = 200) -> DataFrame:
    """Distinct connections per role in each time bucket (about ``buckets`` buckets over the
    recording's ``span``, each a whole number of seconds)."""
    first, last = span
    length = (last - first + 1) if first is not None and last is not None else 1
    width = 1000 * max(1, math.ceil(length / buckets / 1000))
    bucket = (F.floor(F.col("ts_ms") / width) * width).cast("bigint").alias("bucket_ts")
    return (snapshots.select(bucket, "role", *CONNECTION).distinct()
            .groupBy("bucket_ts", "role").agg(F.count("*").alias("connections"))
            .select("bucket_ts", F.lit(width).cast("bigint").alias("bucket_ms"), "role",
                    "connections"))


# -- 2. bootstrap connections that outlived their purpose --------------------------------


def bootstrap_outlived(lifetimes: DataFrame, after_ms: int) -> DataFrame:
    """Bootstrap connections still seen ``after_ms`` or more after their client learned the
    cluster (its first snapshot row with role broker or coordinator)."""
    learned = (lifetimes.filter(F.col("client").isNotNull()).groupBy(*CLIENT)
               .agg(F.min("first_linked_ts").alias("learned_ts"))
               .filter(F.col("learned_ts").isNotNull()))
    outlived = F.col("last_seen_ts") - F.col("learned_ts")
    return (lifetimes.filter(F.col("role") == "bootstrap").join(learned, list(CLIENT))
            .withColumn("open_after_learned_ms", outlived)
            .filter(F.col("open_after_learned_ms") >= after_ms)
            .select(*CLIENT, "client_id", "client_type", "key", "node_id", "remote",
                    "first_seen_ts", "learned_ts", "last_seen_ts", "open_after_learned_ms",
                    "closed_observed"))


# -- 3. idle-reap churn and the metadata-refresh / idle-reap cycle ---------------------------


def _churnable(lifetimes: DataFrame) -> DataFrame:
    """The connections a reap cycle can run on, each with the ``address`` it reopens to:
    broker and coordinator ones with a known broker (``address`` null: they reopen to the
    same broker), and bootstrap ones (``broker_id`` null, ``address`` their remote: the
    cluster address a re-bootstrap connects to again)."""
    bootstrap = F.col("role") == "bootstrap"
    return (lifetimes.filter((F.col("role").isin(*LINKED_ROLES) & F.col("broker_id").isNotNull())
                             | (bootstrap & F.col("remote").isNotNull()))
            .withColumns({"broker_id": F.when(~bootstrap, F.col("broker_id")),
                          "address": F.when(bootstrap, F.col("remote"))}))


def close_reasons(events: DataFrame) -> DataFrame:
    """Per connection, the reason its ``closed`` event told (null in a version 1 recording)."""
    return (events.filter(F.col("kind") == "closed").groupBy(*CONNECTION)
            .agg(F.max_by("reason", "ts_ms").alias("close_reason")))


def idle_churn(lifetimes: DataFrame, events: DataFrame, configs: DataFrame,
               params: Params) -> DataFrame:
    """Per client, role and broker (a bootstrap connection: per cluster address):
    connections opened and closed while observed that carried no traffic (idle_churned),
    and reap cycles: an idle-churned connection closed by an idle reap followed by a new
    connection to the same broker (address) in the same role within metadata.max.age.ms
    (+ tolerance) of its close. Closed by an idle reap: as its ``closed`` event told it
    (an idle reason; ``unknown`` is none), or where the recording tells no reason, a
    lifetime within tolerance of the idle limit. Each connection is in one row (its last
    role) and counts at most one cycle, its own close: a bootstrap connection the client
    dropped once it had the metadata is no reap, though it follows a reap and precedes the
    next."""
    tolerance = params.tolerance_ms
    ages = configs.select("session_id", "pid", "client", "metadata_max_age_ms")
    lifetimes = (_churnable(lifetimes).join(ages, ["session_id", "pid", "client"], "left")
                 .join(close_reasons(events), list(CONNECTION), "left"))
    max_age = F.coalesce(F.col("metadata_max_age_ms"), F.lit(params.metadata_max_age_ms))
    limit = F.coalesce(F.col("idle_limit_ms"), F.lit(params.idle_limit_ms))
    lifetime = F.col("last_seen_ts") - F.col("first_seen_ts")
    reaped = (F.when(F.col("close_reason").isNotNull(),
                     F.col("close_reason").isin(*sorted(IDLE_REASONS)))
              .otherwise(F.abs(F.col("lifetime_ms") - limit) <= tolerance))
    target = (*CLIENT, "role", "broker_id", "address")
    order = Window.partitionBy(*target).orderBy("first_seen_ts", "key")
    gap = F.lead("first_seen_ts").over(order) - F.col("last_seen_ts")
    idle = (F.col("opened_observed") & F.col("closed_observed")
            & F.coalesce(~F.col("carried_traffic"), F.lit(False)))
    marked = (lifetimes.withColumn("lifetime_ms", lifetime).withColumn("gap_ms", gap)
              .withColumn("idle", idle)
              .withColumn("cycle", F.col("idle") & reaped
                          & F.coalesce(F.col("gap_ms") <= max_age + tolerance, F.lit(False))))
    return (marked.groupBy(*target).agg(
        F.max("client_id").alias("client_id"), F.max("client_type").alias("client_type"),
        F.count("*").alias("lifetimes"), _flag_count(F.col("idle")).alias("idle_churned"),
        _flag_count(F.col("cycle")).alias("reap_cycles"),
        F.round(F.avg(F.when(F.col("idle"), F.col("lifetime_ms")))).cast("bigint")
        .alias("mean_idle_lifetime_ms"),
        F.round(F.avg(F.when(F.col("cycle"), F.col("gap_ms")))).cast("bigint")
        .alias("mean_reopen_gap_ms"))
        .filter(F.col("idle_churned") > 0)
        .select(*CLIENT, "client_id", "client_type", "role", "broker_id", "address",
                "lifetimes", "idle_churned", "reap_cycles", "mean_idle_lifetime_ms",
                "mean_reopen_gap_ms"))


# -- 4. fan-out waste --------------------------------------------------------------------------


def fanout_waste(lifetimes: DataFrame) -> DataFrame:
    """Per client: brokers it held a broker or coordinator connection to, those some
    connection carried traffic to, those none did (idle only), the idle-only ones whose
    connections were all closed while observed (reaped), and those of unknown traffic."""
    per_broker = _linked(lifetimes).groupBy(*CLIENT, "broker_id").agg(
        F.max("client_id").alias("client_id"), F.max("client_type").alias("client_type"),
        F.max("carried_traffic").alias("traffic"),
        F.min("closed_observed").alias("all_closed"))
    traffic = F.col("traffic")
    return (per_broker.groupBy(*CLIENT).agg(
        F.max("client_id").alias("client_id"), F.max("client_type").alias("client_type"),
        F.count("*").alias("brokers_connected"),
        _flag_count(traffic).alias("brokers_with_traffic"),
        _flag_count(~traffic).alias("brokers_idle_only"),
        _flag_count(~traffic & F.col("all_closed")).alias("brokers_reaped"),
        _flag_count(traffic.isNull()).alias("brokers_traffic_unknown"))
        .withColumn("waste_ratio",
                    F.round(F.col("brokers_idle_only") / F.col("brokers_connected"), 4)))


# -- 5. CLOSE_WAIT exposure --------------------------------------------------------------------


def close_wait(stretches: DataFrame, lifetimes: DataFrame) -> DataFrame:
    """One row per connection seen in CLOSE_WAIT: who and which broker, the first and last
    poll that saw it so, their distance (close_wait_ms), and whether the client closed it
    while observed (resolved)."""
    close_wait = stretches.filter(F.col("state") == TcpState.CLOSE_WAIT.value)
    waiting = close_wait.groupBy(*CONNECTION).agg(
        F.min("first_seen_ts").alias("first_close_wait_ts"),
        F.max("last_seen_ts").alias("last_close_wait_ts"),
        F.sum("polls").alias("polls_in_close_wait"))
    return (waiting.join(lifetimes, list(CONNECTION))
            .select(*CLIENT, "client_id", "role", "broker_id", "node_id", "remote", "key",
                    "first_close_wait_ts", "last_close_wait_ts",
                    (F.col("last_close_wait_ts") - F.col("first_close_wait_ts"))
                    .alias("close_wait_ms"), F.col("polls_in_close_wait").alias("polls"),
                    (F.col("last_close_wait_ts") < F.col("process_last_ts")).alias("resolved")))


# -- 6. coordinator load -----------------------------------------------------------------------


def coordinator_load(lifetimes: DataFrame, configs: DataFrame) -> DataFrame:
    """Per broker: coordinator connections to it, their clients, and the consumer groups
    (group.id from the sessions' clients_json) of those clients."""
    groups = configs.select("session_id", "pid", "client", "group_id")
    coordinator = (F.col("role") == "coordinator") & F.col("broker_id").isNotNull()
    coordinators = lifetimes.filter(coordinator).join(groups, ["session_id", "pid", "client"],
                                                      "left")
    return coordinators.groupBy("broker_id").agg(
        F.count("*").alias("coordinator_connections"), _distinct(*CLIENT).alias("clients"),
        F.countDistinct("group_id").alias("groups"),
        F.concat_ws(",", F.array_sort(F.collect_set("group_id"))).alias("group_ids"),
        F.countDistinct(F.when(F.col("group_id").isNull(), F.struct(*CLIENT)))
        .alias("clients_without_group"))


# -- chart companions --------------------------------------------------------------------------


def idle_age(snapshots: DataFrame, bins: int = 20) -> DataFrame:
    """Snapshot rows (and distinct connections) per role by idle age as a share of the
    connection's idle limit, in ``bins`` equal bins; bin ``bins`` holds idle >= limit."""
    known = snapshots.filter(F.col("idle_ms").isNotNull() & (F.col("idle_limit_ms") > 0))
    bin_ = F.least(F.floor(F.col("idle_ms") * bins / F.col("idle_limit_ms")), F.lit(bins))
    per_connection = known.groupBy("role", bin_.cast("int").alias("bin"), *CONNECTION).agg(
        F.count("*").alias("n"))
    return (per_connection.groupBy("role", "bin")
            .agg(F.sum("n").alias("rows"), F.count("*").alias("connections"))
            .select("role", "bin", (F.col("bin") / bins).alias("from_fraction"),
                    F.when(F.col("bin") < bins, (F.col("bin") + 1) / bins).alias("to_fraction"),
                    "rows", "connections"))


def event_counts(events: DataFrame) -> DataFrame:
    """Recorded events per host, kind and role, and the connections they concern."""
    return events.groupBy("host", "kind", "role").agg(
        F.count("*").alias("events"), _distinct("session_id", "pid", "key").alias("connections"))


def why_closed(events: DataFrame) -> DataFrame:
    """Closed connections per host, broker, side and reason (schema 2 events; a version 1
    recording's closes count as ``unknown``), with the processes and clients concerned and
    how long they had been idle and open."""
    closed = events.filter(F.col("kind") == "closed").withColumns({
        "closed_by": F.coalesce("closed_by", F.lit("unknown")),
        "reason": F.coalesce("reason", F.lit("unknown"))})
    return closed.groupBy("host", "broker_id", "closed_by", "reason").agg(
        F.count("*").alias("closes"), _distinct("session_id", "pid").alias("processes"),
        _distinct("session_id", "pid", "client").alias("clients"),
        F.percentile_approx("idle_before_ms", 0.5).alias("median_idle_before_ms"),
        F.percentile_approx("lifetime_ms", 0.5).alias("median_lifetime_ms"))


def churn_and_leaks(events: DataFrame, lives: DataFrame, params: Params) -> DataFrame:
    """Per process: connections opened a minute over its recorded span, those closed within
    ``short_lived_ms``, and the churn events it raised by pattern (a storm counts for every
    process of its host's session, pid 0), with the highest rate. Where the kernel's TCP
    events ran (schema 3 ``lives``), the counts are theirs, exact however short-lived the
    connections (``counted`` says "kernel"), with the failed connects and refusals; else the
    polls' ``opened`` and ``closed`` events ("polls")."""
    times = (events.select("session_id", "host", F.col("ts_ms").alias("t"))
             .unionByName(lives.select("session_id", "host", F.col("opened_ms").alias("t")))
             .unionByName(lives.select("session_id", "host", F.col("closed_ms").alias("t"))))
    span = times.groupBy("session_id", "host").agg(
        ((F.max("t") - F.min("t")) / 60_000).alias("minutes"))
    pattern, ending = F.col("pattern"), F.col("ending")
    polled = events.groupBy(*PROCESS).agg(
        _flag_count(F.col("kind") == "opened").alias("polled_opened"),
        _flag_count((F.col("kind") == "closed")
                    & (F.col("lifetime_ms") <= params.short_lived_ms)).alias("polled_short"),
        *(_flag_count(pattern == p).alias(p) for p in CHURN_PATTERNS),
        F.max("rate").alias("max_churn_rate"))
    exact = lives.groupBy(*PROCESS).agg(
        F.count("*").alias("exact_opened"),
        _flag_count(F.col("closed_ms") - F.col("opened_ms")
                    <= params.short_lived_ms).alias("exact_short"),
        _flag_count(ending == "connect_failed").alias("failed_connects"),
        _flag_count(ending == "per_ip_rejected").alias("refused"))
    counts = (polled.join(exact, list(PROCESS), "full_outer")
              .fillna(0, [*CHURN_PATTERNS, "polled_opened", "polled_short", "failed_connects",
                          "refused"])
              .withColumns({
                  "counted": F.when(F.col("exact_opened").isNotNull(), F.lit("kernel"))
                              .otherwise(F.lit("polls")),
                  "opened": F.coalesce("exact_opened", "polled_opened"),
                  "short_lived": F.coalesce("exact_short", "polled_short")})
              .drop("exact_opened", "exact_short", "polled_opened", "polled_short"))
    return (counts.join(span, ["session_id", "host"])
            .withColumn("opened_per_minute",
                        F.round(F.col("opened") / F.greatest("minutes", F.lit(1.0)), 2))
            .withColumn("suspect", F.col("client_per_message") > 0)
            .drop("minutes")
            .filter((F.col("opened") > 0) | F.col("max_churn_rate").isNotNull()))


# -- the registry ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shared:
    """What the analyses read: the recording's tables, the parts several of them share
    (cached by ``run_all``), the recording's span and the knobs."""

    frames: Frames
    stretches: DataFrame
    lifetimes: DataFrame
    configs: DataFrame
    span: tuple[int | None, int | None]
    params: Params


@dataclass(frozen=True)
class Analysis:
    """One named analysis: how to compute it, sort it, and which columns a terminal shows."""

    name: str
    title: str
    compute: Callable[[Shared], DataFrame]
    order: tuple[str, ...]  # "-column" sorts descending
    show: tuple[str, ...]


ANALYSES = (
    Analysis("connections_by_role", "Connections by role, state and client type",
             lambda s: connections_by_role(s.stretches),
             ("-scope", "host", "-connections", "role", "state", "client_type"),
             ("scope", "host", "role", "state", "client_type", "connections", "snapshot_rows")),
    Analysis("peak_connections", "Peak concurrent connections per client",
             lambda s: peak_connections(s.frames.snapshots, s.lifetimes),
             ("-peak_connections", "session_id", "host", "pid", "client"),
             ("host", "pid", "client", "client_type", "peak_connections", "peak_ts",
              "mean_connections")),
    Analysis("connections_over_time", "Connections over time by role",
             lambda s: connections_over_time(s.frames.snapshots, s.span, s.params.time_buckets),
             ("bucket_ts", "role"), ("bucket_ts", "role", "connections")),
    Analysis("bootstrap_outlived", "Bootstrap connections that outlived their purpose",
             lambda s: bootstrap_outlived(s.lifetimes, s.params.bootstrap_outlived_ms),
             ("-open_after_learned_ms", "session_id", "host", "pid", "key"),
             ("host", "pid", "client", "node_id", "remote", "learned_ts",
              "open_after_learned_ms", "closed_observed")),
    Analysis("idle_churn", "Idle-reap churn and metadata-refresh reap cycles",
             lambda s: idle_churn(s.lifetimes, s.frames.events, s.configs, s.params),
             ("-reap_cycles", "-idle_churned", "session_id", "host", "pid", "client", "role",
              "broker_id", "address"),
             ("host", "pid", "client", "role", "broker_id", "address", "idle_churned",
              "reap_cycles", "mean_idle_lifetime_ms", "mean_reopen_gap_ms")),
    Analysis("fanout_waste", "Fan-out waste: brokers connected vs brokers used",
             lambda s: fanout_waste(s.lifetimes),
             ("-brokers_idle_only", "session_id", "host", "pid", "client"),
             ("host", "pid", "client", "client_type", "brokers_connected",
              "brokers_with_traffic", "brokers_idle_only", "brokers_reaped", "waste_ratio")),
    Analysis("close_wait", "CLOSE_WAIT exposure",
             lambda s: close_wait(s.stretches, s.lifetimes),
             ("-close_wait_ms", "session_id", "host", "pid", "key"),
             ("host", "pid", "client", "broker_id", "remote", "first_close_wait_ts",
              "close_wait_ms", "resolved")),
    Analysis("coordinator_load", "Coordinator load per broker",
             lambda s: coordinator_load(s.lifetimes, s.configs),
             ("-groups", "-coordinator_connections", "broker_id"),
             ("broker_id", "coordinator_connections", "clients", "groups", "group_ids",
              "clients_without_group")),
    Analysis("idle_age", "Idle age against the idle limit",
             lambda s: idle_age(s.frames.snapshots, s.params.idle_bins),
             ("role", "bin"), ("role", "from_fraction", "to_fraction", "rows", "connections")),
    Analysis("why_closed", "Why connections closed",
             lambda s: why_closed(s.frames.events),
             ("-closes", "host", "broker_id", "closed_by", "reason"),
             ("host", "broker_id", "closed_by", "reason", "closes", "processes",
              "median_idle_before_ms", "median_lifetime_ms")),
    Analysis("churn_and_leaks", "Churn and leaks per process",
             lambda s: churn_and_leaks(s.frames.events, s.frames.lives, s.params),
             ("-suspect", "-opened_per_minute", "session_id", "host", "pid"),
             ("host", "pid", "counted", "opened", "opened_per_minute", "short_lived",
              *CHURN_PATTERNS, "failed_connects", "refused", "max_churn_rate")),
    Analysis("findings", "Findings: kmon's diagnoses, newest first",
             lambda s: findings(s.frames.findings),
             ("-since_ts", "session_id", "host", "pid", "reason"),
             ("host", "pid", "process_name", "reason", "since_ts", "last_seen_ts", "held_ms",
              "polls", "detail", "fix")),
    Analysis("event_counts", "Recorded events",
             lambda s: event_counts(s.frames.events),
             ("host", "kind", "role"), ("host", "kind", "role", "events", "connections")),
)


def findings(frame: DataFrame) -> DataFrame:
    """Each finding of each process once (``(session_id, host, pid, reason, since_ms)``: one
    gone and raised again is another): when it was raised, last seen, how long it held,
    over how many polls, and what kmon said of it last."""
    last = F.struct("ts_ms", "detail", "fix", "evidence_json")
    return (frame.groupBy(*PROCESS, "reason", "since_ms")
            .agg(F.first("process_name").alias("process_name"),
                 F.max("ts_ms").alias("last_seen_ts"), F.count("*").alias("polls"),
                 F.max(last).alias("last"))
            .select(*PROCESS, "process_name", "reason", F.col("since_ms").alias("since_ts"),
                    "last_seen_ts", (F.col("last_seen_ts") - F.col("since_ms")).alias("held_ms"),
                    "polls", F.col("last.detail").alias("detail"),
                    F.col("last.evidence_json").alias("evidence_json"),
                    F.col("last.fix").alias("fix")))


def _sorted(frame: DataFrame, order: tuple[str, ...]) -> DataFrame:
    return frame.orderBy(*(F.col(c[1:]).desc() if c.startswith("-") else F.col(c).asc()
                           for c in order))


def total_rows(table: pa.Table) -> int:
    """The rows of the analysis ``table`` came from: more than it holds when only its top
    rows were kept (see ``run_all``)."""
    return int((table.schema.metadata or {}).get(TOTAL_ROWS, table.num_rows))


def _top(frame: DataFrame, rows: int) -> pa.Table:
    """The first ``rows`` rows of the sorted ``frame`` (all of them for 0) on the driver, the
    count of all of them recorded where some were left out; Spark keeps only the top
    ``rows`` per partition, so neither it nor the driver ever holds the whole result."""
    if not rows:
        return frame.toArrow()
    table = frame.limit(rows + 1).toArrow()
    if table.num_rows <= rows:
        return table
    return table.slice(0, rows).replace_schema_metadata(
        {**(table.schema.metadata or {}), TOTAL_ROWS: str(frame.count()).encode()})


def run_all(frames: Frames, params: Params, max_rows: int = MAX_ROWS) -> dict[str, pa.Table]:
    """Every analysis, sorted, its top ``max_rows`` rows (0: all) collected to the driver
    as Arrow tables (``total_rows`` tells how many it had).

    One pass over the snapshot rows builds the connection stretches, cached with the
    lifetimes and client configurations built on them; the job that finds the
    recording's span fills those caches before the analyses run, a few at once, so
    that one's scheduling overlaps another's tasks.
    """
    stretches = connection_stretches(frames.snapshots).cache()
    lifetimes = connection_lifetimes(stretches).cache()
    configs = client_configs(frames.sessions).cache()
    shared = Shared(frames, stretches, lifetimes, configs, recording_span(lifetimes), params)

    def collect(analysis: Analysis) -> pa.Table:
        return _top(_sorted(analysis.compute(shared), analysis.order), max_rows)

    try:
        with ThreadPoolExecutor(CONCURRENT_JOBS) as pool:
            return dict(zip((a.name for a in ANALYSES), pool.map(collect, ANALYSES),
                            strict=True))
    finally:
        for cached in (configs, lifetimes, stretches):
            cached.unpersist()

"""What hostile Metadata answers make each poll spend on confirming brokers.

    python -m benchmarks confirm_cost [--processes 8] [--polls 200]

60 fake brokers (kmon.devtools.hostile_broker, mode ``liar``, real loopback sockets)
answer kmon's own Metadata query. Hostile: each answers 2,600 brokers on its own port,
none of them itself, so no answer ever confirms its endpoint. Baseline, in the same run:
each answers the 60 brokers as an honest cluster does, itself among them. A poll runs
``ConfirmedBrokers.check`` once per watched process (``--processes``, as the sampler
does) with the 60 endpoints; the polls go on until every endpoint was asked and then
``--polls`` more. Printed: the mean and the slowest poll's confirmation time of each, and
the hostile one against the baseline.
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchmarks.api import Result
from kmon.devtools.hostile_broker import HostileBroker, crowd
from kmon.sources.brokers.broker_query import ConfirmedBrokers
from kmon.sources.brokers.dns import Resolver
from kmon.sources.kernel.sockets import Endpoint

ENDPOINTS, ENTRIES = 60, 2_600


def polls(hostile: bool, processes: int, steady: int) -> list[float]:
    """Each poll's confirmation time (s), from the first query to ``steady`` polls after
    the last endpoint was asked."""
    liars = [HostileBroker("liar") for _ in range(ENDPOINTS)]
    asked = [Endpoint("127.0.0.1", liar.port) for liar in liars]
    for liar in liars:
        liar.lies.update(crowd(liar.port, ENTRIES) if hostile else
                         {n: (e.ip, e.port) for n, e in enumerate(asked)})
    confirmed = ConfirmedBrokers(Resolver())
    times: list[float] = []
    left = steady
    try:
        while left > 0:
            started = time.perf_counter()
            for _ in range(processes):
                confirmed.check(asked)
            times.append(time.perf_counter() - started)
            if all(liar.asked_by_kmon.is_set() for liar in liars):
                left -= 1
            time.sleep(0.005)
    finally:
        for liar in liars:
            liar.close()
    if not hostile:
        assert len(confirmed.brokers) == ENDPOINTS, "the honest cluster was not confirmed"
    return times


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--polls", type=int, default=200)


def run(args: argparse.Namespace) -> Result:
    result = Result()
    honest = polls(False, args.processes, args.polls)
    hostile = polls(True, args.processes, args.polls)
    for name, times in (("honest", honest), ("hostile", hostile)):
        print(f"{name:8} {len(times):5} polls of {args.processes} processes: mean "
              f"{statistics.mean(times) * 1000:8.2f} ms, slowest {max(times) * 1000:8.2f} ms")
        result.figure(f"{name} poll mean", statistics.mean(times) * 1000, "ms")
        result.figure(f"{name} poll slowest", max(times) * 1000, "ms")
    print(f"hostile/honest: mean {statistics.mean(hostile) / statistics.mean(honest):.2f}x, "
          f"slowest {max(hostile) / max(honest):.2f}x")
    result.ratio("hostile / honest, mean", "hostile poll mean", "honest poll mean")
    result.ratio("hostile / honest, slowest", "hostile poll slowest", "honest poll slowest")
    return result

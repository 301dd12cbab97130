"""What the per-process sample costs on a busy host, against the kernel read it starts with.

    python -m benchmarks sampler_cost [--processes 50] [--connections 100] [--polls 30]

The load of ``host_view_cost.py`` (--processes helper processes of --connections
connections each to a listener that answers like a broker, --rate Produce requests a
second each), in its steady state: once the samplers watch them, each helper sends a
request on every connection (SIGUSR1), and the run starts when every socket has a wire
flow with API counts (a broker row by the wire). In this process, one ``ProcessSampler``
per helper, sharing one socket reader and the host's one capture as the host view's do
(and with the garbage collector set as it sets it), is sampled once a second (``--wire
auto``: run as root). Each poll also reads every helper's sockets alone
(``SocketReader.sockets_of``, the kernel read every sample starts with): the baseline
measured in the same run. Shares are this
process's CPU seconds (all its threads) per poll.
"""

from __future__ import annotations

import argparse
import os
import signal
import time

from benchmarks import host_view_cost
from benchmarks.api import BenchmarkError, Result, UsageError
from benchmarks.helpers import Helpers

WARM_UP_POLLS = 30  # at most, until every row is a broker's by the wire


def measure(args: argparse.Namespace) -> Result:
    from kmon.engine.heap import settle_heap
    from kmon.engine.sampler import ProcessSampler, SamplerSettings
    from kmon.model import Role
    from kmon.sources.kernel.socket_readers import open_socket_reader
    from kmon.sources.packets.host_wire import HostWire

    with Helpers("host_view_cost", host_view_cost.READY_TIMEOUT_S) as helpers:
        fleet, clients = host_view_cost.start_load(helpers, args.load, args.processes,
                                                   args.connections, args.rate)
        reader, wire = open_socket_reader(), HostWire()
        settings = SamplerSettings(require_kafka=False)
        samplers = [ProcessSampler(pid, reader, settings, host_wire=wire) for pid in clients]
        settle_heap()  # as the host view does before its refreshes
        sample_s = read_s = 0.0
        rows = wired = measured = 0
        try:
            for poll in range(WARM_UP_POLLS + args.polls):
                began = time.monotonic()
                cpu = time.process_time()
                views = [s.sample(int(time.time() * 1000)) for s in samplers]
                sampled = time.process_time()
                for pid in clients:
                    reader.sockets_of(pid)
                read = time.process_time()
                if poll == 0:
                    fleet.send_signal(signal.SIGUSR1)
                broker = sum(c.role is Role.BROKER for v in views for c in v.connections)
                if measured or broker == args.processes * args.connections:
                    sample_s += sampled - cpu
                    read_s += read - sampled
                    rows += sum(len(v.connections) for v in views)
                    wired += broker
                    measured += 1
                    if measured == args.polls:
                        break
                time.sleep(max(0.0, began + 1.0 - time.monotonic()))
        finally:
            for sampler in samplers:
                sampler.close()
    if not measured:
        raise BenchmarkError("the wire never named every connection's role")
    polls = measured
    print(f"the sample of {args.processes} processes x {args.connections} connections, "
          f"{args.rate:g} Produce requests/s each, --wire auto, {polls} polls a second apart "
          f"(CPU seconds of this process per poll)")
    print(f"  rows a poll {rows / polls:,.0f}, of them broker by the wire "
          f"{wired / polls:,.0f}")
    print(f"  sample every process  {sample_s / polls * 1000:7.1f} ms a poll "
          f"({sample_s / rows * 1e6:.1f} us a row)")
    print(f"  their sockets alone   {read_s / polls * 1000:7.1f} ms a poll   "
          f"ratio {sample_s / read_s:.2f}x")
    result = Result()
    result.figure("sample every process", sample_s / polls * 1000, "ms a poll")
    result.figure("their sockets alone", read_s / polls * 1000, "ms a poll")
    result.ratio("sample / sockets alone", "sample every process", "their sockets alone")
    return result


def options(parser: argparse.ArgumentParser) -> None:
    host_view_cost.load_arguments(parser)
    parser.add_argument("--polls", type=int, default=30)


def run(args: argparse.Namespace) -> Result:
    host_view_cost.load_shape(args)
    if args.processes < 1 or args.connections < 1 or args.polls < 1 or args.rate <= 0:
        raise UsageError("need --processes >= 1, --connections >= 1, --polls >= 1, --rate > 0")
    if os.geteuid() != 0:
        raise BenchmarkError("the wire needs CAP_NET_RAW: run as root")
    try:
        return measure(args)
    except (OSError, RuntimeError) as exc:
        raise BenchmarkError(str(exc)) from exc

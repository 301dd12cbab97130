"""kmon's verdicts against ground truth on a real Apache Kafka cluster.

Each scenario starts a real cluster, a real client and ``kmon attach PID --json``
beside independent oracles - a packet capture of loopback (who sent the first
FIN or RST of each connection, a SYN answered by a RST), the client's own debug
log (librdkafka's broker thread names), the broker's log - and counts kmon's
verdicts right, wrong and confidently wrong. No oracle reads kmon's output: the
two meet only on a connection's 4-tuple. ``python -m benchmarks.truth --help``.
"""

"""The in-process agent for confluent-kafka clients: ``instrument(config)``, ``kmon run``.

It turns on librdkafka statistics and writes them to a private spool that
``kmon.sources.clients.librdkafka_stats`` reads.
"""

from kmon.agent.client_hook import instrument

__all__ = ["instrument"]

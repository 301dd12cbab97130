"""kmon: a live view of every TCP connection a Kafka client process holds."""

__version__ = "0.1.0"

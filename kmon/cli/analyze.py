"""``kmon analyze PATH``: fleet analysis of recorded sessions on Apache Spark."""

from kmon.analysis.command import configure, run

__all__ = ["configure", "run"]

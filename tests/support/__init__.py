"""The helpers kmon's tests share, by subject (``tests/helpers.py`` re-exports them all):
processes and their output, users, clusters and clients, the wire, recordings and their
replays, kmon serve, the dashboards, assertions."""

"""kmon's host agent outputs: Prometheus metrics over HTTP, and the poll loop they share."""

"""Processes as /proc and psutil describe them: names, owners, limits, kmon's own, and the
environment kmon hands its children."""

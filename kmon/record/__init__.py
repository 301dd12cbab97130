"""Recorded sessions: kmon's snapshots and events as versioned, partitioned Parquet."""

"""kmon's presentation layer: what the terminal shows of snapshots and events."""

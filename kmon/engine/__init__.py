"""The engine: sampler (gather, then resolve), monitor (events), discovery, cluster watch,
replay, and the facade that the dashboard and the command line talk to."""

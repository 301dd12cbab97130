"""kmon's benchmarks: ``python -m benchmarks NAME`` (``--list`` names them)."""

"""The benchmarks the runner knows, by name (each a module of this package)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from types import ModuleType

#: every benchmark module; tests/test_benchmarks_runner.py checks none is left out
NAMES = (
    "analyze_cost", "analyze_driver_memory", "analyze_scale", "confirm_cost", "dashboard_cost",
    "host_view_cost", "jmx_cost", "json_cost", "kafka_cluster_start", "kernel_events_cost",
    "poll_cost", "ps_latency", "record_cost", "replay_memory", "sampler_cost", "serve_cost",
    "spool_cost", "table_cost", "terminal_cost", "test_durations", "tls_cost", "wire_cost",
    "wire_flood",
)
#: the package's modules that are not benchmarks: the runner and what benchmarks share
SUPPORT = ("__init__", "__main__", "api", "helpers", "host_loads", "registry", "results")
#: not a cost but kmon's correctness against ground truth: run as is, no result file
TRUTH = "truth"


def load(name: str) -> ModuleType:
    return importlib.import_module(f"benchmarks.{name}")


def summary(name: str) -> str:
    """The first sentence of the benchmark's docstring, read without importing it."""
    path = Path(__file__).with_name(f"{name}.py")
    if not path.exists():
        path = Path(__file__).with_name(name) / "__init__.py"
    docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
    return " ".join(docstring.split("\n\n")[0].split())

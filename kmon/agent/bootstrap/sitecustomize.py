"""Put on PYTHONPATH by ``kmon run`` (alone: nothing else of kmon is): instruments
confluent-kafka clients at start-up.

kmon is loaded from the exact directory ``kmon run`` names in KMON_AGENT_ROOT,
only for the Python version it was started with (KMON_AGENT_PYTHON); the
app's own sitecustomize, if it had one, still runs.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _load_kmon_from(root: str) -> None:
    """Import the ``kmon`` package found in ``root`` (and no other) as ``kmon``."""
    if "kmon" in sys.modules:
        return
    spec = importlib.machinery.PathFinder.find_spec("kmon", [root])
    if spec is None or spec.loader is None:
        raise ImportError(f"no kmon package in {root}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["kmon"] = module
    spec.loader.exec_module(module)


def _instrument() -> None:
    root = os.environ.get("KMON_AGENT_ROOT", "")
    wanted = os.environ.get("KMON_AGENT_PYTHON", "")
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if not root or wanted != here:
        print(f"kmon run: clients not instrumented (kmon runs on Python {wanted or '?'}, "
              f"this program on {here})", file=sys.stderr)
        return
    try:
        _load_kmon_from(root)
        from kmon.agent.autoinstrument import chain_next_sitecustomize, install
    except ImportError as err:
        print(f"kmon run: clients not instrumented ({err})", file=sys.stderr)
        return
    install()
    chain_next_sitecustomize(__file__)


_instrument()

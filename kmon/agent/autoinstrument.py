"""Zero-code instrumentation behind ``kmon run -- python app.py``.

The program starts with kmon's ``sitecustomize`` first on its path, which
replaces confluent-kafka's client classes by subclasses whose constructors
pass the configuration through ``kmon.agent.instrument``. The application
code stays untouched.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from kmon.agent import instrument

# (module, class name, client type)
CLIENT_CLASSES = (
    ("confluent_kafka", "Producer", "producer"),
    ("confluent_kafka", "Consumer", "consumer"),
    ("confluent_kafka", "SerializingProducer", "producer"),
    ("confluent_kafka", "DeserializingConsumer", "consumer"),
    ("confluent_kafka.admin", "AdminClient", "admin"),
)
BOOTSTRAP_DIR = Path(__file__).parent / "bootstrap"


def instrumented_class(cls: type[Any], client_type: str) -> type:
    """A subclass of ``cls`` whose constructor instruments its configuration."""

    def __init__(self, *args, **kwargs):
        if args and isinstance(args[0], dict):
            args = (instrument(args[0], client_type), *args[1:])
        elif not args:
            kwargs = instrument(kwargs, client_type)
        cls.__init__(self, *args, **kwargs)

    return type(cls.__name__, (cls,), {"__init__": __init__, "__module__": cls.__module__,
                                        "__qualname__": cls.__qualname__,
                                        "__kmon_instrumented__": True})


def install() -> None:
    """Patch every confluent-kafka client class that is importable here."""
    if importlib.util.find_spec("confluent_kafka") is None:
        return
    for module_name, class_name, client_type in CLIENT_CLASSES:
        module = importlib.import_module(module_name)
        cls = getattr(module, class_name, None)
        if cls is None or getattr(cls, "__kmon_instrumented__", False):
            continue
        patched = instrumented_class(cls, client_type)
        for name, mod in list(sys.modules.items()):
            if name.startswith("confluent_kafka") and getattr(mod, class_name, None) is cls:
                setattr(mod, class_name, patched)


def chain_next_sitecustomize(own_file: str) -> None:
    """Run the ``sitecustomize`` that kmon's own one shadows, if there is one."""
    own_dir = os.path.dirname(os.path.abspath(own_file))
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == own_dir:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_kmon_chained_sitecustomize", candidate)
            if spec and spec.loader:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


def run_environment(base: dict[str, str]) -> dict[str, str]:
    """The environment ``kmon run`` gives the program it starts.

    Only the bootstrap directory (which holds nothing but kmon's sitecustomize,
    first so that it runs and then chains to the program's own) is added to
    PYTHONPATH: the sitecustomize loads kmon from the exact directory named in
    KMON_AGENT_ROOT, for this Python version only.
    """
    env = dict(base)
    paths = [str(BOOTSTRAP_DIR), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env["KMON_AGENT_ROOT"] = str(Path(__file__).resolve().parents[2])
    env["KMON_AGENT_PYTHON"] = f"{sys.version_info[0]}.{sys.version_info[1]}"
    return env

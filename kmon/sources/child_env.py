"""What kmon and the JVMs it starts take from an inherited environment: nothing that runs code.

A JVM reads options from ``JAVA_TOOL_OPTIONS``, ``_JAVA_OPTIONS`` and
``JDK_JAVA_OPTIONS`` (``JDK_JAVAC_OPTIONS`` for javac) and classes from
``CLASSPATH``: one ``-javaagent:/home/eve/a.jar`` there runs eve's code in every
JVM kmon starts, as root when root kept eve's environment (``sudo -E``, ``su``
without ``-``). kmon's own JVMs (the JMX helper, javac) get ``jvm_environment``, a
minimal one built from nothing; a JVM that needs the caller's settings (Spark's
driver) gets ``spark_launch_environment``, the caller's minus those variables.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

from kmon.files import root_only

# Variables every JVM (or javac) reads options, agents or classes from.
JVM_INJECTION = ("JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "JDK_JAVAC_OPTIONS",
                 "CLASSPATH", "JAVA_OPTIONS", "JAVA_OPTS")
SHELL_STARTUP = ("BASH_ENV", "ENV")  # files a non-interactive shell runs first
SYSTEM_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def jvm_environment(java: str) -> dict[str, str]:
    """The whole environment of a JVM tool kmon runs: the directory of ``java`` (a path
    kmon resolved and checked, links followed) first on PATH, the system's directories
    after it, a UTF-8 locale; nothing from kmon's own environment."""
    bin_dir = Path(os.path.realpath(java)).parent
    return {"PATH": os.pathsep.join((str(bin_dir), *SYSTEM_PATH)), "LANG": "C.UTF-8"}


def without_jvm_injection(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the variables a JVM takes options, agents or classes from."""
    return {name: value for name, value in env.items() if name not in JVM_INJECTION}


def spark_launch_environment(env: Mapping[str, str], as_root: bool) -> dict[str, str]:
    """The environment pyspark launches its driver JVM with: ``env`` without the JVM's
    injection variables and, as root, without anything that names a program or script
    another user could change: no ``SPARK_*``/``PYSPARK_*`` setting (``SPARK_HOME`` and
    ``SPARK_CONF_DIR`` name scripts spark-submit runs), no ``BASH_ENV``/``ENV`` (run by
    spark-submit's shell), a ``JAVA_HOME`` and ``PATH`` entries only where root alone can
    change them, and Python workers run by this same interpreter."""
    clean = without_jvm_injection(env)
    if not as_root:
        return clean
    clean = {name: value for name, value in clean.items()
             if not name.startswith(("SPARK_", "PYSPARK_")) and name not in SHELL_STARTUP}
    path = [d for d in env.get("PATH", "").split(os.pathsep) if d and root_only(Path(d))]
    clean["PATH"] = os.pathsep.join(dict.fromkeys([*path, *SYSTEM_PATH]))
    if "JAVA_HOME" in clean and not root_only(Path(clean["JAVA_HOME"], "bin", "java")):
        del clean["JAVA_HOME"]
    clean["PYSPARK_PYTHON"] = sys.executable
    return clean


@contextlib.contextmanager
def launching_with(env: dict[str, str]) -> Iterator[None]:
    """``os.environ`` is ``env`` for the duration (for a library that launches its child
    from ``os.environ``, such as pyspark); restored after."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


"""What kmon and the JVMs it starts take from an inherited environment: nothing that runs code.

A JVM reads options from ``JAVA_TOOL_OPTIONS``, ``_JAVA_OPTIONS`` and
``JDK_JAVA_OPTIONS`` (``JDK_JAVAC_OPTIONS`` for javac) and classes from
``CLASSPATH``: one ``-javaagent:/home/eve/a.jar`` there runs eve's code in every
JVM kmon starts, as root when root kept eve's environment (``sudo -E``, ``su``
without ``-``). kmon's own JVMs (the JMX helper, javac) get ``jvm_environment``, a
minimal one built from nothing; a JVM that needs the caller's settings (Spark's
driver) gets ``spark_launch_environment``, the caller's minus those variables.

kmon itself loads OpenSSL (librdkafka's and Python's), Kerberos and SASL, which
load libraries named by ``OPENSSL_CONF`` and the like: as root,
``drop_library_loaders`` removes those from kmon's own environment at start.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, MutableMapping
from pathlib import Path

# Variables every JVM (or javac) reads options, agents or classes from.
JVM_INJECTION = ("JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "JDK_JAVAC_OPTIONS",
                 "CLASSPATH", "JAVA_OPTIONS", "JAVA_OPTS")
# Variables naming libraries or configurations (engines, providers, plugins) that OpenSSL,
# Kerberos or Cyrus SASL load into the process that reads them.
LIBRARY_LOADERS = ("OPENSSL_CONF", "OPENSSL_ENGINES", "OPENSSL_MODULES", "KRB5_CONFIG",
                   "SASL_PATH", "SASL_CONF_PATH")
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
    injection variables and, as root, without any ``SPARK_*``/``PYSPARK_*`` setting
    either (a ``SPARK_HOME`` or ``SPARK_CONF_DIR`` names scripts that spark-submit runs,
    ``PYSPARK_PYTHON`` a program), so root's Spark is the one installed with pyspark."""
    clean = without_jvm_injection(env)
    if as_root:
        clean = {name: value for name, value in clean.items()
                 if not name.startswith(("SPARK_", "PYSPARK_"))}
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


def drop_library_loaders(environ: MutableMapping[str, str], as_root: bool) -> None:
    """As root, remove ``LIBRARY_LOADERS`` from ``environ`` (kmon's own ``os.environ``,
    before anything loads OpenSSL): another user's choices there (``sudo -E``, ``su``
    without ``-``) would load their library into root's kmon."""
    if as_root:
        for name in LIBRARY_LOADERS:
            environ.pop(name, None)

"""What kmon and the programs it starts take from an inherited environment: nothing that runs code.

Every program kmon starts (java, javac, keytool, mvn) is found by ``trusted_program``:
as root, only a file that root alone can change, in a directory root alone can change,
named by its real path. A JVM reads options from ``JAVA_TOOL_OPTIONS``, ``_JAVA_OPTIONS`` and
``JDK_JAVA_OPTIONS`` (``JDK_JAVAC_OPTIONS`` for javac) and classes from
``CLASSPATH``: one ``-javaagent:/home/eve/a.jar`` there runs eve's code in every
JVM kmon starts, as root when root kept eve's environment (``sudo -E``, ``su``
without ``-``). kmon's own JVMs (the JMX helper, javac) get ``jvm_environment``, a
minimal one built from nothing (Maven gets ``maven_environment``, the same with root's
own home); a JVM that needs the caller's settings (Spark's
driver) gets ``spark_launch_environment``, the caller's minus those variables.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

from kmon.files import root_only

# Variables every JVM (or javac) reads options, agents or classes from.
JVM_INJECTION = ("JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "JDK_JAVAC_OPTIONS",
                 "CLASSPATH", "JAVA_OPTIONS", "JAVA_OPTS")
SHELL_STARTUP = ("BASH_ENV", "ENV")  # files a non-interactive shell runs first
SYSTEM_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def trusted_dirs(dirs: list[str]) -> list[str]:
    """The absolute directories of ``dirs`` that root alone can change (links followed,
    every directory above them checked), in order, each once."""
    return [d for d in dict.fromkeys(dirs) if os.path.isabs(d) and root_only(Path(d))]


def trusted_program(name: str, env: Mapping[str, str] = os.environ,
                    home: str | None = None) -> str | None:
    """The program ``name`` kmon may run, or None: from ``$HOME_VARIABLE/bin`` (``home``
    names the variable, e.g. JAVA_HOME) when set, else from ``PATH``.

    As root, the environment may be another user's (``sudo -E``, ``su`` without ``-``):
    only a directory root alone can change is searched (the system's directories after
    ``PATH``'s), only a file root alone can change is taken, and its real path is given,
    so what runs is what was checked. Otherwise the user's own directories are theirs.
    """
    dirs = [str(Path(env[home], "bin"))] if home and env.get(home) else []
    dirs += [d for d in env.get("PATH", "").split(os.pathsep) if d]
    as_root = os.geteuid() == 0
    if as_root:
        dirs = trusted_dirs([*dirs, *SYSTEM_PATH])
    for directory in dirs:
        candidate = Path(directory, name)
        if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
            continue
        if not as_root:
            return str(candidate)
        if root_only(candidate):
            return os.path.realpath(candidate)
    return None


def jvm_environment(java: str) -> dict[str, str]:
    """The whole environment of a JVM tool kmon runs: the directory of ``java`` (a path
    kmon resolved and checked, links followed) first on PATH, the system's directories
    after it, a UTF-8 locale; nothing from kmon's own environment."""
    bin_dir = Path(os.path.realpath(java)).parent
    return {"PATH": os.pathsep.join((str(bin_dir), *SYSTEM_PATH)), "LANG": "C.UTF-8"}


def maven_environment(java: str) -> dict[str, str]:
    """The environment ``mvn`` runs in. As root: ``jvm_environment`` with ``JAVA_HOME``
    the checked JDK's and ``HOME`` root's own (Maven's settings and repository are
    root's; no ``MAVEN_OPTS``, no ``~/.mavenrc`` of another user). Otherwise the user's
    own minus the JVM's injection variables (``MAVEN_OPTS`` may set their proxy)."""
    if os.geteuid() != 0:
        return without_jvm_injection(os.environ)
    return {**jvm_environment(java), "JAVA_HOME": str(Path(os.path.realpath(java)).parents[1]),
            "HOME": pwd.getpwuid(0).pw_dir}


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
    path = trusted_dirs(env.get("PATH", "").split(os.pathsep))
    clean["PATH"] = os.pathsep.join(dict.fromkeys([*path, *SYSTEM_PATH]))
    java = trusted_program("java", env, home="JAVA_HOME")
    clean.pop("JAVA_HOME", None)
    if java is not None:
        clean["JAVA_HOME"] = str(Path(java).parents[1])
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


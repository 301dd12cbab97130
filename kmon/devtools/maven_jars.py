"""Java jars from Maven Central, resolved once with Maven into kmon's cache and reused after.

A set of artifacts (``group:artifact:version``) is resolved with its runtime
dependencies by ``mvn dependency:copy-dependencies`` into
``$XDG_CACHE_HOME/kmon/jars/NAME`` (``~/.cache/kmon/jars/NAME``; as root
``/var/cache/kmon/jars/NAME``, see ``kmon.files.private_cache_dir``: the jars run as
root); a later call finds them there and asks nothing of the network. A lock keeps
two kmon processes from resolving the same set at once. Maven and its Java are
found, and run, as ``kmon.sources.processes.child_env`` says.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from xml.sax.saxutils import escape

from kmon.files import UnsafeFile, private_cache_dir
from kmon.sources.processes.child_env import maven_environment, trusted_program

KAFKA_VERSION = "4.4.0"
BROKER_JARS = ("broker-" + KAFKA_VERSION, (
    f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}",
    "org.apache.logging.log4j:log4j-slf4j-impl:2.24.3",  # the broker logs through slf4j 1.x
))
COMPLETE = "complete"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"


class JarsUnavailable(Exception):
    """The jars are not cached and Maven could not fetch them."""


def resolved_jars(name: str, artifacts: tuple[str, ...]) -> list[Path]:
    """The jars of ``artifacts`` and their runtime dependencies, fetched the first time."""
    try:
        folder = private_cache_dir("jars") / name
    except UnsafeFile as err:
        raise JarsUnavailable(f"refusing to use the jar cache: {err}") from None
    if not (folder / COMPLETE).is_file():
        with open(folder.parent / f".{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (folder / COMPLETE).is_file():
                _fetch(folder, artifacts)
    return sorted(folder.glob("*.jar"))


def classpath(jars: list[Path]) -> str:
    return os.pathsep.join(str(jar) for jar in jars)


def _fetch(folder: Path, artifacts: tuple[str, ...]) -> None:
    mvn = trusted_program("mvn")
    if mvn is None:
        raise JarsUnavailable("Maven (mvn) is needed once to fetch Apache Kafka's jars "
                              "from Maven Central: install it (apt-get install maven)")
    java = trusted_program("java", home="JAVA_HOME")
    if java is None:
        raise JarsUnavailable("Maven needs Java to fetch Apache Kafka's jars: install a JDK")
    with tempfile.TemporaryDirectory(prefix="kmon-jars-", dir=folder.parent) as work:
        pom = Path(work) / "pom.xml"
        pom.write_text(_pom(artifacts))
        lib = Path(work) / "lib"
        result = subprocess.run(
            [mvn, "-B", "-q", "-f", str(pom), DEPENDENCY_PLUGIN + ":copy-dependencies",
             "-DincludeScope=runtime", f"-DoutputDirectory={lib}"],
            capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd=work,
            env=maven_environment(java))
        if result.returncode != 0 or not any(lib.glob("*.jar")):
            raise JarsUnavailable(f"could not fetch {', '.join(artifacts)} with Maven: "
                                  f"{_last_error(result.stdout + result.stderr)}")
        (lib / COMPLETE).write_text("\n".join(artifacts) + "\n")
        shutil.rmtree(folder, ignore_errors=True)
        lib.rename(folder)


def _pom(artifacts: tuple[str, ...]) -> str:
    dependencies = []
    for coordinate in artifacts:
        group, artifact, version = (escape(part) for part in coordinate.split(":"))
        dependencies.append(f"<dependency><groupId>{group}</groupId><artifactId>{artifact}"
                            f"</artifactId><version>{version}</version></dependency>")
    return ('<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0'
            '</modelVersion><groupId>kmon</groupId><artifactId>kmon-jars</artifactId>'
            f'<version>1</version><dependencies>{"".join(dependencies)}</dependencies>'
            '</project>')


def _last_error(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line.removeprefix("[ERROR] ") for line in lines if line.startswith("[ERROR] ")]
    return (errors or lines or ["Maven printed nothing"])[0][:300]

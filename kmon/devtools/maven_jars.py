"""Java jars from Maven Central, resolved once with Maven into kmon's cache and reused after.

A set of artifacts (``group:artifact:version``) is resolved with its runtime
dependencies by ``mvn dependency:copy-dependencies`` into
``$XDG_CACHE_HOME/kmon/jars/NAME`` (``~/.cache/kmon/jars/NAME``); a later call
finds them there and asks nothing of the network. A lock keeps two kmon
processes from resolving the same set at once.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from xml.sax.saxutils import escape

from kmon.sources.child_env import without_jvm_injection

KAFKA_VERSION = "4.4.0"
BROKER_JARS = ("broker-" + KAFKA_VERSION, (
    f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}",
    "org.apache.logging.log4j:log4j-slf4j-impl:2.24.3",  # the broker logs through slf4j 1.x
))
COMPLETE = "complete"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"


class JarsUnavailable(Exception):
    """The jars are not cached and Maven could not fetch them."""


def cache_root() -> Path:
    """kmon's cache: ``$XDG_CACHE_HOME/kmon`` or ``~/.cache/kmon``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kmon"


def resolved_jars(name: str, artifacts: tuple[str, ...], root: Path | None = None) -> list[Path]:
    """The jars of ``artifacts`` and their runtime dependencies, fetched the first time."""
    folder = (root or cache_root()) / "jars" / name
    if not (folder / COMPLETE).is_file():
        folder.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(folder.parent / f".{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (folder / COMPLETE).is_file():
                _fetch(folder, artifacts)
    return sorted(folder.glob("*.jar"))


def classpath(jars: list[Path]) -> str:
    return os.pathsep.join(str(jar) for jar in jars)


def _fetch(folder: Path, artifacts: tuple[str, ...]) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarsUnavailable("Maven (mvn) is needed once to fetch Apache Kafka's jars "
                              "from Maven Central: install it (apt-get install maven)")
    with tempfile.TemporaryDirectory(prefix="kmon-jars-", dir=folder.parent) as work:
        pom = Path(work) / "pom.xml"
        pom.write_text(_pom(artifacts))
        lib = Path(work) / "lib"
        result = subprocess.run(
            [mvn, "-B", "-q", "-f", str(pom), DEPENDENCY_PLUGIN + ":copy-dependencies",
             "-DincludeScope=runtime", f"-DoutputDirectory={lib}"],
            capture_output=True, text=True, stdin=subprocess.DEVNULL,
            env=without_jvm_injection(os.environ))  # MAVEN_OPTS kept: a proxy is set there
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

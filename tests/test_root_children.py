"""Root runs no code of another user's when it starts a program of its own (java, mvn,
keytool, the broker's jars) under that user's environment (``sudo -E``, ``su`` without
``-``): ``kmon devcluster --kafka`` as such a root."""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from pathlib import Path

import psutil
import pytest
from helpers import Child, require_java

from kmon.devtools import maven_jars
from kmon.devtools.kafka_cluster import KafkaCluster
from kmon.files import ROOT_CACHE, root_only
from kmon.sources.processes.child_env import trusted_program

pytestmark = [pytest.mark.integration,
              pytest.mark.root(reason="the attack is on kmon as root")]

NOBODY = 65534  # the other user: not root, not us


def hostile_environment(tmp_path: Path, monkeypatch, jars: str) -> Path:
    """A user's environment kept by root, every piece of it the user's: a ``~/bin`` first
    on PATH and a JAVA_HOME whose java, javac, keytool and mvn write a marker when run;
    MAVEN_OPTS and JAVA_TOOL_OPTIONS that make any JVM write one; XDG_CACHE_HOME and HOME
    holding kmon's jar cache for ``jars`` with a ``complete`` marker and a planted jar.
    Returns the directory the markers would be written to."""
    markers = tmp_path / "markers"
    markers.mkdir()
    home = tmp_path / "eve"
    bin_dir = home / "bin"
    bin_dir.mkdir(parents=True)
    for tool in ("java", "javac", "keytool", "mvn"):
        (bin_dir / tool).write_text(f"#!/bin/sh\ntouch {markers}/{tool}\nexit 0\n")
        (bin_dir / tool).chmod(0o755)
    planted = home / ".cache" / "kmon" / "jars" / jars
    planted.mkdir(parents=True)
    (planted / maven_jars.COMPLETE).write_text("planted\n")
    (planted / "planted.jar").write_text("planted\n")
    for path in (home, *home.rglob("*")):
        os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("JAVA_HOME", str(home))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("MAVEN_OPTS", f"-Xlog:gc:file={markers}/maven-opts")
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", f"-Xlog:gc:file={markers}/java-tool-options")
    return markers


def test_root_finds_its_programs_only_where_root_alone_can_change_them(tmp_path, monkeypatch):
    markers = hostile_environment(tmp_path, monkeypatch, "none")
    link_dir = tmp_path / "links"  # root's own directory, but one others may write
    link_dir.mkdir(mode=0o777)
    link_dir.chmod(0o777)
    if shutil.which("java", path="/usr/bin:/bin"):
        (link_dir / "java").symlink_to(shutil.which("java", path="/usr/bin:/bin"))
    monkeypatch.setenv("PATH", f"{link_dir}{os.pathsep}{os.environ['PATH']}")
    for tool in ("java", "javac", "keytool", "mvn"):
        found = trusted_program(tool, home="JAVA_HOME")
        assert found is None or (root_only(Path(found)) and not found.startswith(str(tmp_path))
                                 and found == os.path.realpath(found)), (tool, found)
    assert sorted(markers.iterdir()) == []


@pytest.mark.java  # a JDK and the broker's jars, as kmon devcluster --kafka finds them
def test_root_devcluster_runs_no_users_java_and_no_planted_jar(tmp_path, monkeypatch):
    """What ``kmon devcluster --kafka`` does before its nodes start (``prepare``: find and
    check java, resolve the broker's jars) under the hostile environment."""
    require_java()
    markers = hostile_environment(tmp_path, monkeypatch, maven_jars.BROKER_JARS[0])
    cluster = KafkaCluster()
    try:
        cluster.prepare()
    except maven_jars.JarsUnavailable as err:
        pytest.skip(str(err))
    assert sorted(p.name for p in markers.iterdir()) == []
    assert root_only(Path(cluster._java))
    jars = cluster._classpath.split(os.pathsep)
    assert jars and not [j for j in jars if j.startswith(str(tmp_path)) or "planted" in j]
    assert all(Path(j).parent == ROOT_CACHE / "jars" / maven_jars.BROKER_JARS[0] for j in jars)


def test_root_fetches_jars_with_its_own_maven_java_and_environment(tmp_path, monkeypatch):
    """A real Maven run as root: not the user's ``mvn``, none of the user's MAVEN_OPTS or
    JAVA_TOOL_OPTIONS (either would write a marker, or with a missing agent fail the
    fetch), the jars in root's own cache, the planted ones never returned."""
    require_java()
    name = f"kmon-test-{uuid.uuid4().hex[:8]}"
    markers = hostile_environment(tmp_path, monkeypatch, name)
    try:
        try:
            jars = maven_jars.resolved_jars(name, ("org.slf4j:slf4j-api:2.0.17",))
        except maven_jars.JarsUnavailable as err:
            assert sorted(p.name for p in markers.iterdir()) == []
            pytest.skip(str(err))
        assert sorted(p.name for p in markers.iterdir()) == []
        assert [j.name for j in jars] == ["slf4j-api-2.0.17.jar"]
        assert jars[0].parent == ROOT_CACHE / "jars" / name and root_only(jars[0])
    finally:
        shutil.rmtree(ROOT_CACHE / "jars" / name, ignore_errors=True)
        (ROOT_CACHE / "jars" / f".{name}.lock").unlink(missing_ok=True)


def test_root_kmon_devcluster_kafka_runs_none_of_a_users_code(tmp_path, monkeypatch):
    """The real ``kmon devcluster --kafka`` as root under the hostile environment: its node
    answers, no marker is written (by the start, keytool, the formatting or the node's
    JVM), and the node runs the system's java with none of the user's variables."""
    from confluent_kafka.admin import AdminClient

    require_java()
    markers = hostile_environment(tmp_path, monkeypatch, maven_jars.BROKER_JARS[0])
    child = Child([sys.executable, "-m", "kmon", "devcluster", "--kafka"], env=dict(os.environ))
    try:
        bootstrap = child.wait_line("127.0.0.1:", timeout=180)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        assert len(admin.list_topics(timeout=20).brokers) == 1
        (jvm,) = [p for p in psutil.Process(child.pid).children(recursive=True)
                  if "kafka.Kafka" in p.cmdline()]
        assert root_only(Path(jvm.exe())) and not jvm.cmdline()[0].startswith(str(tmp_path))
        assert not {"JAVA_TOOL_OPTIONS", "MAVEN_OPTS", "JAVA_HOME"} & set(jvm.environ())
        assert not [j for j in jvm.cmdline() if str(tmp_path) in j or "planted" in j]
        assert sorted(p.name for p in markers.iterdir()) == []
    finally:
        child.stop()

"""Root inherits nothing: kmon's JVMs, its config file and its client properties under
an environment another user set (``sudo -E``, ``su`` without ``-``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import Child

from kmon.sources import jmx
from kmon.sources.child_env import JVM_INJECTION, jvm_environment, spark_launch_environment

needs_java = pytest.mark.skipif(shutil.which("java") is None or shutil.which("javac") is None,
                                reason="a JDK (java and javac) is not installed")

SLEEPER = """class Sleeper {
    public static void main(String[] args) throws Exception {
        System.out.println("READY");
        Thread.sleep(120_000);
    }
}
"""


def hostile_java_environment(monkeypatch, markers: Path) -> dict[str, Path]:
    """Every variable a JVM takes options from, each set to write its own marker file
    when a JVM starts (``-Xlog:...:file=``), as a user's environment could."""
    planted = {name: markers / f"{name}.log" for name in
               ("JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "JDK_JAVAC_OPTIONS")}
    for name, marker in planted.items():
        option = f"-J-Xlog:gc:file={marker}" if name == "JDK_JAVAC_OPTIONS" else (
            f"-Xlog:gc:file={marker}")
        monkeypatch.setenv(name, option)
    monkeypatch.setenv("CLASSPATH", str(markers))
    return planted


@pytest.mark.integration
@needs_java
def test_the_jmx_helper_and_javac_ignore_a_hostile_java_environment(tmp_path, monkeypatch):
    """A real JVM is watched; kmon compiles its helper with javac and starts it with
    every JVM option variable planted: no marker file is written by either child."""
    source = tmp_path / "Sleeper.java"
    source.write_text(SLEEPER)
    target = Child(["java", str(source)], env={"PATH": os.environ["PATH"]})
    try:
        target.wait_line("READY", timeout=60)
        markers = tmp_path / "markers"
        markers.mkdir()
        planted = hostile_java_environment(monkeypatch, markers)
        # the planted options do take effect on a JVM that inherits them (the test can fail)
        subprocess.run(["java", "-version"], capture_output=True, check=True)
        assert planted["JAVA_TOOL_OPTIONS"].exists()
        for marker in markers.iterdir():
            marker.unlink()
        cache = tmp_path / "cache"
        cache.mkdir(mode=0o700)
        monkeypatch.setattr(jmx, "_cache_dir", lambda: cache)  # compile afresh, with javac
        with jmx.JmxSource(target.pid, interval_ms=200) as source_:
            reading = source_.wait_first(60)
        assert reading.clients == []
        assert any(cache.glob("*/KmonJmx.class"))
        assert sorted(markers.iterdir()) == []
    finally:
        target.stop()


def test_a_jvm_environment_holds_nothing_of_the_callers(monkeypatch):
    monkeypatch.setenv("CLASSPATH", "/home/eve")
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-javaagent:/home/eve/a.jar")
    monkeypatch.setenv("LD_PRELOAD", "/home/eve/a.so")
    env = jvm_environment("/usr/lib/jvm/jdk/bin/java")
    assert set(env) == {"PATH", "LANG"}
    assert env["PATH"].split(os.pathsep)[0] == "/usr/lib/jvm/jdk/bin"


def test_root_launches_spark_without_the_users_spark_or_java_settings():
    env = {name: "x" for name in JVM_INJECTION} | {
        "SPARK_HOME": "/home/eve/spark", "SPARK_CONF_DIR": "/home/eve/conf",
        "PYSPARK_PYTHON": "/home/eve/py", "PATH": "/usr/bin", "HOME": "/root"}
    assert spark_launch_environment(env, as_root=True) == {"PATH": "/usr/bin", "HOME": "/root"}
    as_user = spark_launch_environment(env, as_root=False)
    assert not set(JVM_INJECTION) & set(as_user)
    assert as_user["SPARK_HOME"] == "/home/eve/spark"

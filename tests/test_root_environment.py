"""Root inherits nothing: kmon's JVMs, its config file and its client properties under
an environment another user set (``sudo -E``, ``su`` without ``-``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import Child, assert_one_clear_line

from kmon.cli.command_config import read_command_config
from kmon.cli.config import ClusterConfig, Config, ConfigError, load_config
from kmon.files import root_only
from kmon.sources.jvm import jmx
from kmon.sources.processes.child_env import (
    JVM_INJECTION,
    SYSTEM_PATH,
    jvm_environment,
    spark_launch_environment,
)

as_root = pytest.mark.root(reason="the defence is root's")
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
@pytest.mark.java
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


def test_root_launches_spark_without_the_users_spark_java_or_shell_settings(tmp_path):
    users_bin = tmp_path / "bin"  # a directory others may write: eve's ~/bin, say
    (users_bin / "java" / "bin").mkdir(parents=True)
    users_bin.chmod(0o757)
    env = {name: "x" for name in JVM_INJECTION} | {
        "SPARK_HOME": "/home/eve/spark", "SPARK_CONF_DIR": "/home/eve/conf",
        "PYSPARK_PYTHON": "/home/eve/py", "BASH_ENV": "/home/eve/.bashrc", "HOME": "/root",
        "PATH": f"{users_bin}:/usr/bin", "JAVA_HOME": str(users_bin / "java")}
    as_root = spark_launch_environment(env, as_root=True)
    assert set(as_root) - {"JAVA_HOME"} == {"HOME", "PATH", "PYSPARK_PYTHON"}
    assert root_only(Path(as_root.get("JAVA_HOME", "/"), "bin", "java")) or (
        "JAVA_HOME" not in as_root)
    assert sorted(as_root["PATH"].split(os.pathsep)) == sorted(SYSTEM_PATH)
    assert as_root["PYSPARK_PYTHON"] == sys.executable
    as_user = spark_launch_environment(env, as_root=False)
    assert not set(JVM_INJECTION) & set(as_user)
    assert as_user["SPARK_HOME"] == "/home/eve/spark" and as_user["PATH"] == env["PATH"]


@as_root
@pytest.mark.integration
@pytest.mark.java
@needs_java
def test_root_kmon_analyze_runs_spark_with_none_of_a_users_java_spark_or_shell_settings(
        tmp_path):
    """``kmon analyze`` on a real recording, its Spark driver launched with a hostile
    JAVA_TOOL_OPTIONS, _JAVA_OPTIONS, SPARK_CONF_DIR (a spark-env.sh) and BASH_ENV, each
    writing its own marker: the analysis runs, no marker is written."""
    from kmon.model import Connection, ProcessView, Role, Snapshot
    from kmon.record.recorder import Recorder

    recording = tmp_path / "rec"
    recorder = Recorder(recording, "h", "s1", interval_ms=1000)
    conn = Connection(key="sock:1", role=Role.BROKER, node_id=1, broker_id=1, client=None,
                      local="127.0.0.1:5000", remote="127.0.0.1:9092", state="ESTABLISHED")
    recorder.add(Snapshot(ts_ms=1, host="h", processes=[ProcessView(1, "p", "",
                                                                    connections=[conn])]), [])
    recorder.close()
    markers = tmp_path / "markers"
    conf = tmp_path / "conf"
    markers.mkdir()
    conf.mkdir()
    (conf / "spark-env.sh").write_text(f"touch {markers}/spark-env\n")
    (tmp_path / "bash_env").write_text(f"touch {markers}/bash-env\n")
    env = {**os.environ, "JAVA_TOOL_OPTIONS": f"-Xlog:gc:file={markers}/tool",
           "_JAVA_OPTIONS": f"-Xlog:gc:file={markers}/underscore",
           "SPARK_CONF_DIR": str(conf), "BASH_ENV": str(tmp_path / "bash_env")}
    result = kmon("analyze", str(recording), "--master", "local[1]", env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in markers.iterdir()) == []
# -- the config file -----------------------------------------------------------------------------

PLUGIN = r"""
#include <stdio.h>
__attribute__((constructor)) static void planted(void) {
    FILE *marker = fopen("%s", "w");
    if (marker) { fputs("loaded\n", marker); fclose(marker); }
}
"""


def config_file(tmp_path: Path, text: str, mode: int = 0o644) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    path.chmod(mode)
    return path


def record_with(config: Path, cluster: str, *extra: str):
    """``kmon record --cluster CLUSTER`` with the config file named by $KMON_CONFIG, as a
    user's environment kept by ``sudo -E`` would name it."""
    return kmon("record", "--cluster", cluster, "--cluster-timeout", "2s", "--duration", "1s",
                "--out", str(config.parent / "out"), *extra,
                env={**os.environ, "KMON_CONFIG": str(config)})


def kmon(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kmon", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.mark.integration
@as_root
def test_a_config_file_of_another_user_is_refused(tmp_path, throwaway_user):
    config = config_file(tmp_path, "[clusters.prod]\nbootstrap = '127.0.0.1:1'\n")
    os.chown(config, throwaway_user.pw_uid, throwaway_user.pw_gid)
    assert_one_clear_line(record_with(config, "prod"), 1, str(config), "owned by uid")


@pytest.mark.integration
@pytest.mark.parametrize("mode", [0o664, 0o646, 0o666], ids=oct)
def test_a_config_file_others_may_write_is_refused(tmp_path, mode):
    config = config_file(tmp_path, "[clusters.prod]\nbootstrap = '127.0.0.1:1'\n", mode)
    assert_one_clear_line(record_with(config, "prod"), 1, str(config), "writable", "chmod go-w")


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to build the plugin")
def test_a_plugin_library_named_in_a_config_file_is_never_loaded(tmp_path):
    """A real shared library that writes a marker when loaded, named by the config file's
    plugin.library.paths: kmon refuses the file and the library never runs. Given on the
    command line (-X), the same library is loaded: the marker shows the test can fail."""
    marker = tmp_path / "loaded"
    source = tmp_path / "plugin.c"
    source.write_text(PLUGIN % marker)
    library = tmp_path / "libplanted.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    config = config_file(tmp_path, f"[clusters.prod]\nbootstrap = '127.0.0.1:1'\n"
                                   f"[clusters.prod.properties]\n"
                                   f"'plugin.library.paths' = '{library}'\n")
    assert_one_clear_line(record_with(config, "prod"), 1, "plugin.library.paths", "-X")
    assert not marker.exists()
    config = config_file(tmp_path, "[clusters.prod]\nbootstrap = '127.0.0.1:1'\n")
    record_with(config, "prod", "-X", f"plugin.library.paths={library}")
    assert marker.exists()


@pytest.mark.parametrize("name", ["sasl.kerberos.kinit.cmd", "ssl.engine.location",
                                  "ssl.providers", "error_cb", "ssl.certificate.verify_cb"])
def test_a_property_that_loads_code_or_runs_a_command_is_refused_from_a_file(tmp_path, name):
    config = config_file(tmp_path, f"[clusters.prod]\nbootstrap = '127.0.0.1:1'\n"
                                   f"[clusters.prod.properties]\n'{name}' = 'x'\n")
    with pytest.raises(ConfigError, match="command line"):
        load_config(config)
    prod = load_config(config_file(tmp_path, "[clusters.prod]\nbootstrap = '127.0.0.1:1'\n")
                       ).resolve_cluster("prod", {name: "x"})
    assert prod.properties == {name: "x"}


@pytest.mark.integration
@as_root
def test_f_props_follow_no_users_link_and_never_show_the_files_content(tmp_path,
                                                                       throwaway_user):
    """A user links ``~/client.properties`` to a root-only file holding a secret and has
    root's kmon read it with ``-F``: refused as a link; named directly, the file's first
    line is named by its number, its content never shown."""
    secret = tmp_path / "token"
    secret.write_text("TopSecretToken123\n")
    secret.chmod(0o600)
    link = Path(throwaway_user.pw_dir, "client.properties")
    subprocess.run(["runuser", "-u", throwaway_user.pw_name, "--", "ln", "-s", str(secret),
                    str(link)], check=True)
    for props, words in ((link, ("symbolic link",)), (secret, ("line 1", "not a client"))):
        result = kmon("attach", "1", "--once", "-b", "127.0.0.1:9", "-F", str(props),
                      env=dict(os.environ))
        assert_one_clear_line(result, 1, "--command-config", str(props), *words)
        assert "TopSecret" not in result.stderr + result.stdout


@pytest.mark.parametrize(("text", "words"), [
    ("# a comment\nTopSecretToken123\n", ("line 2 is not a client property",)),
    ("socket.timeout.ms=TopSecretToken123\n", ("line 1", "value of socket.timeout.ms")),
    ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=TopSecretToken123\n", ("together",)),
    ("my_TopSecretToken123_cb=x\n", ("line 1", "a callback", "-X")),
])
def test_f_props_errors_name_lines_and_known_keys_only(tmp_path, text, words):
    props = tmp_path / "p.properties"
    props.write_text(text)
    with pytest.raises(ConfigError) as err:
        read_command_config(props)
    assert all(word in str(err.value) for word in words), str(err.value)
    assert "TopSecret" not in str(err.value)


@pytest.mark.integration
def test_a_bootstrap_string_is_never_shadowed_by_a_configured_name(tmp_path):
    shadow = "[clusters.'127.0.0.1:9092']\nbootstrap = '10.9.9.9:9092'\n"
    assert_one_clear_line(record_with(config_file(tmp_path, shadow), "127.0.0.1:9092"), 1,
                          "clusters.127.0.0.1:9092", "bootstrap string")
    planted = ClusterConfig("127.0.0.1:9092", "10.9.9.9:9092", {"plugin.library.paths": "x"})
    config = Config(path=tmp_path / "config.toml", clusters={planted.name: planted})
    cluster = config.resolve_cluster("127.0.0.1:9092", {})
    assert (cluster.bootstrap, cluster.properties) == ("127.0.0.1:9092", {})


OPENSSL_CONF = """openssl_conf = init
[init]
engines = engines
[engines]
planted = planted
[planted]
dynamic_path = {library}
"""


@pytest.mark.integration
@as_root
@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to build the library")
def test_root_kmon_loads_no_library_an_inherited_openssl_conf_names(tmp_path):
    """A user's OPENSSL_CONF naming an engine library (a real one that writes a marker
    when loaded) is dropped by root's kmon before its Kafka client starts TLS; the same
    configuration does load it into a plain Python that creates a TLS context."""
    marker = tmp_path / "loaded"
    source = tmp_path / "engine.c"
    source.write_text(PLUGIN % marker)
    library = tmp_path / "libengine.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    conf = tmp_path / "openssl.cnf"
    conf.write_text(OPENSSL_CONF.format(library=library))
    env = {**os.environ, "OPENSSL_CONF": str(conf)}
    result = kmon("record", "--cluster", "127.0.0.1:1", "-X", "security.protocol=SSL",
                  "--cluster-timeout", "2s", "--out", str(tmp_path / "out"), env=env)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert not marker.exists()
    subprocess.run([sys.executable, "-c", "import ssl; ssl.create_default_context()"],
                   env=env, capture_output=True)
    assert marker.exists()

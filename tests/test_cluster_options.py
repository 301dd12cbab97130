"""One way to name a cluster: ``-b NAME|HOST:PORT``, ``-X`` and ``-F props`` on every command
that names one, against the real mock cluster."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import psutil
import pytest
from helpers import Child, assert_one_clear_line, cluster_id, get, kmon, start_serve, wait_for

from kmon.cli import build_parser
from kmon.cli.command_config import as_librdkafka, parse_properties
from kmon.cli.config import ConfigError, load_config
from kmon.cli.wiring import named_cluster

pytestmark = pytest.mark.integration

BROKER_IDLE = "7m"  # the config's broker_idle for the named cluster, in ms below
BROKER_IDLE_MS = 420_000


@pytest.fixture
def named(tmp_path, cluster) -> tuple[Path, Path]:
    """(a config naming the mock cluster ``local`` with its broker_idle, a Java .properties
    file for it)."""
    config = tmp_path / "config.toml"
    config.write_text(f'[clusters.local]\nbootstrap = "{cluster}"\nbroker_idle = "{BROKER_IDLE}"\n'
                      '[clusters.local.properties]\n"socket.timeout.ms" = 9000\n')
    props = tmp_path / "client.properties"
    props.write_text("# as kafka-console-consumer.sh --consumer.config takes it\n"
                     "security.protocol = PLAINTEXT\nclient.dns.lookup=use_all_dns_ips\n"
                     "socket.timeout.ms:8000\n")
    return config, props


def test_attach_takes_b_name_and_f_props(start_client, named):
    config, props = named
    client = start_client("producer")
    for flag in ("-b", "--bootstrap-server", "--bootstrap-servers"):
        result = kmon("attach", str(client.pid), "--once", "--json", flag, "local",
                      "--config", str(config), "-F", str(props))
        assert result.returncode == 0, result.stderr
        (process,) = json.loads(result.stdout)["processes"]
        assert process["connections"], process
        assert {c["idle_limit_ms"] for c in process["connections"]} == {BROKER_IDLE_MS}


def test_record_takes_b_name_f_props_and_the_old_cluster_option(start_client, named, tmp_path):
    config, props = named
    start_client("producer")
    for flag in ("-b", "--cluster"):
        out = tmp_path / flag.strip("-")
        result = kmon("record", flag, "local", "--config", str(config), "-F", str(props),
                      "--duration", "1s", "--interval", "250ms", "--out", str(out))
        assert result.returncode == 0, result.stderr
        assert "clients of local (" in result.stderr and any(out.rglob("*.parquet"))


def test_watch_names_its_cluster_with_b_or_its_positional_shorthand(named, cluster):
    from kmon.engine.cluster_watch import ClusterWatcher

    config, props = named
    for argv in (["-b", "local"], ["local"]):
        args = build_parser().parse_args(["watch", *argv, "--config", str(config),
                                          "-F", str(props), "-X", "socket.timeout.ms=7000"])
        chosen = named_cluster(args, load_config(args.config))
        assert (chosen.bootstrap, chosen.broker_idle_ms) == (cluster, BROKER_IDLE_MS)
        # the config's properties, then -F's, then -X's
        assert chosen.properties == {"socket.timeout.ms": "7000",
                                     "security.protocol": "PLAINTEXT"}
        view = ClusterWatcher(chosen.bootstrap, chosen.properties, timeout_s=10).refresh()
        assert len(view.brokers) == 3, view.error


def test_a_bad_property_in_f_props_is_one_clear_line(named, start_client, tmp_path):
    config, _ = named
    client = start_client("producer")
    props = tmp_path / "bad.properties"
    props.write_text("socket.timeout.ms=soon\n")
    assert_one_clear_line(kmon("attach", str(client.pid), "--once", "-b", "local", "--config",
                               str(config), "-F", str(props)), 1, "socket.timeout.ms")


@pytest.mark.parametrize(("text", "java"), [
    ("a=1\nb : 2\nc 3\n# d=4\n! e=5\n", {"a": "1", "b": "2", "c": "3"}),
    ("long = one \\\n    two\n", {"long": "one two"}),
    ("k\\:ey=v\\u0041\\n\n", {"k:ey": "vA\n"}),
    ("empty\n", {"empty": ""}),
])
def test_java_properties_are_parsed_as_java_reads_them(text, java):
    assert parse_properties(text) == java


def test_java_client_properties_become_librdkafka_ones():
    text = (
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
        'username="alice" password="s3 cr3t";\n'
        "ssl.truststore.type=PEM\nssl.truststore.location=/etc/ca.pem\n"
        "ssl.endpoint.identification.algorithm=\n")
    lines = dict.fromkeys(parse_properties(text), 1)
    assert as_librdkafka(parse_properties(text), Path("p"), lines) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice", "sasl.password": "s3 cr3t", "ssl.ca.location": "/etc/ca.pem",
        "ssl.endpoint.identification.algorithm": "none"}


@pytest.mark.parametrize(("text", "words"), [
    ("plugin.library.paths=/tmp/evil.so\n", ["plugin.library.paths", "-X"]),
    ("ssl.truststore.location=/etc/trust.jks\n", ["JKS", "ssl.ca.location"]),
    ("sasl.jaas.config=com.sun.security.auth.module.Krb5LoginModule required "
     'password="hunter2";\n', ["PLAIN and SCRAM"]),
])
def test_what_f_props_cannot_take_is_refused_without_showing_secrets(tmp_path, text, words):
    props = tmp_path / "p.properties"
    props.write_text(text)
    with pytest.raises(ConfigError) as err:
        from kmon.cli.command_config import read_command_config

        read_command_config(props)
    assert all(word in str(err.value) for word in words) and "hunter2" not in str(err.value)


def test_f_props_another_user_may_write_is_refused(tmp_path):
    props = tmp_path / "p.properties"
    props.write_text("security.protocol=SSL\n")
    props.chmod(0o666)
    result = kmon("attach", "1", "--once", "-b", "127.0.0.1:9", "-F", str(props))
    assert_one_clear_line(result, 1, "--command-config", str(props))


def test_ps_takes_b_name_and_f_props(start_client, named):
    config, props = named
    client = start_client("producer")
    result = kmon("ps", "--json", "-b", "local", "--config", str(config), "-F", str(props))
    assert result.returncode == 0, result.stderr
    rows = {row["pid"]: row for row in json.loads(result.stdout)["processes"]}
    assert client.pid in rows, (result.stderr, rows, psutil.Process(client.pid).net_connections())
    assert rows[client.pid]["cluster"] == "local"


def test_serve_takes_b_name_and_f_props_and_serves_that_cluster_only(start_client, named,
                                                                     spool_dir, cluster):
    """``serve -b local`` serves the local cluster's client; a client of another cluster
    running beside it is left out."""
    config, props = named
    start_client("producer", extra_args=("--client-id", "options-local"))
    other = Child([sys.executable, "-m", "kmon", "devcluster", "--brokers", "1"])
    stranger = None
    try:
        bootstrap = other.wait_line("127.0.0.1:", timeout=30)
        stranger = Child([sys.executable, "-c", PRODUCER_OF_ANOTHER_CLUSTER, bootstrap])
        stranger.wait_line("READY", timeout=30)
        serve, address = start_serve("-b", "local", "--config", str(config), "-F", str(props),
                                     "--interval", "250ms", "--wire", "off")
        try:
            body = wait_for(lambda: (lambda text: 'client_id="options-local"' in text and text)(
                get(f"http://{address}/metrics")[2]), "the local cluster's client served")
            assert f'cluster="{cluster_id(bootstrap)}"' not in body  # the stranger's
            assert f'cluster="{cluster_id(cluster)}"' in body  # -b's cluster, by its id
        finally:
            serve.stop()
    finally:
        if stranger is not None:
            stranger.stop()
        other.stop()


PRODUCER_OF_ANOTHER_CLUSTER = """
import sys, time
from confluent_kafka import Producer
producer = Producer({"bootstrap.servers": sys.argv[1]})
producer.produce("elsewhere", b"x")
producer.flush(10)
print("READY", flush=True)
while True:
    producer.poll(0.5)
"""

"""Node-id rules: the Java convention and librdkafka's broker names."""

import pytest

from kmon import classify
from kmon.evidence.logical import classify_broker_entry
from kmon.model import Role

MAX_INT = 2147483647


@pytest.mark.parametrize(("node_id", "role", "broker"), [
    (0, Role.BROKER, 0),
    (1, Role.BROKER, 1),
    (2**20, Role.BROKER, 2**20),
    (-1, Role.BOOTSTRAP, None),
    (-2, Role.BOOTSTRAP, None),
    (-1000, Role.BOOTSTRAP, None),
    (MAX_INT, Role.COORDINATOR, 0),  # 2147483647 - 0
    (MAX_INT - 1, Role.COORDINATOR, 1),
    (MAX_INT - 2**20, Role.COORDINATOR, 2**20),
    (MAX_INT - 2**20 - 1, Role.BROKER, MAX_INT - 2**20 - 1),
])
def test_node_id_rules(node_id, role, broker):
    assert classify.role_of_node_id(node_id) is role
    assert classify.broker_of_node_id(node_id) == broker


@pytest.mark.parametrize("broker_id", [0, 1, 7, 1000, 2**20])
def test_coordinator_id_round_trip(broker_id):
    node_id = classify.coordinator_node_id(broker_id)
    assert node_id == MAX_INT - broker_id
    assert classify.role_of_node_id(node_id) is Role.COORDINATOR
    assert classify.broker_of_node_id(node_id) == broker_id


@pytest.mark.parametrize("broker_id", [-1, 2**20 + 1])
def test_coordinator_id_rejects_impossible_brokers(broker_id):
    with pytest.raises(ValueError):
        classify.coordinator_node_id(broker_id)


def test_bootstrap_ids_count_down_from_minus_one():
    assert [classify.bootstrap_node_id(i) for i in range(3)] == [-1, -2, -3]


LEARNED = {"b1:9092": 1, "b2:9092": 2}
BOOTSTRAP = "b1:9092, b2:9092"


@pytest.mark.parametrize(("name", "entry", "expected"), [
    ("b2:9092/2", {"nodeid": 2, "nodename": "b2:9092", "source": "learned"},
     (Role.BROKER, 2, 2)),
    ("b1:9092/bootstrap", {"nodeid": -1, "nodename": "b1:9092", "source": "configured"},
     (Role.BOOTSTRAP, -1, None)),
    ("b2:9092/bootstrap", {"nodeid": -1, "nodename": "b2:9092", "source": "configured"},
     (Role.BOOTSTRAP, -2, None)),
    ("zz:9092/bootstrap", {"nodeid": -1, "nodename": "zz:9092", "source": "configured"},
     (Role.BOOTSTRAP, -1, None)),
    ("GroupCoordinator", {"nodeid": -1, "nodename": "b2:9092", "source": "logical"},
     (Role.COORDINATOR, MAX_INT - 2, 2)),
    ("TxnCoordinator", {"nodeid": 1, "nodename": "b1:9092", "source": "logical"},
     (Role.COORDINATOR, MAX_INT - 1, 1)),
    ("GroupCoordinator", {"nodeid": -1, "nodename": "b9:9092", "source": "logical"},
     (Role.COORDINATOR, None, None)),
    ("GroupCoordinator", {"nodeid": 2_000_000, "nodename": "big:9092", "source": "logical"},
     (Role.COORDINATOR, None, 2_000_000)),
    ("big:9092/2147483000", {"nodeid": 2147483000, "nodename": "big:9092", "source": "learned"},
     (Role.BROKER, 2147483000, 2147483000)),
])
def test_librdkafka_broker_entries(name, entry, expected):
    assert classify_broker_entry(name, entry, LEARNED, BOOTSTRAP) == expected


@pytest.mark.parametrize(("args", "shown"), [
    (["kcat", "-X", "sasl.password=hunter2"], ["kcat", "-X", "sasl.password=***"]),
    (["app", "--ssl.key.password", "hunter2", "-v"], ["app", "--ssl.key.password", "***", "-v"]),
    (["app", "sasl.jaas.config=x password=y"], ["app", "sasl.jaas.config=***"]),
    (["app", "--api-key=abc", "--keyboard=1"], ["app", "--api-key=***", "--keyboard=1"]),
    (["app", "--conf", '{"sasl.password": "s3", "client.id": "a"}'],
     ["app", "--conf", '{"sasl.password": ***, "client.id": "a"}']),
    (["app", "--url", "https://kmon:s3cret@registry:8081/x"],
     ["app", "--url", "https://kmon:***@registry:8081/x"]),
    (["java", "-Dclient.id=a", "bootstrap.servers=b:9092"],
     ["java", "-Dclient.id=a", "bootstrap.servers=b:9092"]),
])
def test_command_lines_are_redacted(args, shown):
    from kmon.redact import redact_args

    assert redact_args(args) == shown


@pytest.mark.parametrize(("text", "node_id"), [
    ("-1", -1), ("-3", -3), ("3", 3), ("0", 0),
    ("+1", classify.MAX_INT - 1),  # kafka-clients 4.x's group coordinator connection
    ("2147483646", classify.MAX_INT - 1),  # 3.x's for the same
    ("+", None), ("", None), ("x1", None), ("+-1", None), ("1.5", None), ("١", None),
    ("+9999999999", None), ("99999999999", None),
])
def test_java_connection_ids(text, node_id):
    assert classify.java_node_id(text) == node_id

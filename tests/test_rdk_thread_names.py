"""librdkafka's broker thread names read as node ids, and only where the name is whole."""

from __future__ import annotations

import pytest

from kmon.sources.processes.rdk_threads import _thread_node


@pytest.mark.parametrize(("name", "node"), [
    (b"rdk:broker2\n", 2), (b"rdk:broker-1\n", -1), (b"rdk:broker1234\n", 1234),
    (b"rdk:broker12345\n", None),  # 15 bytes: an id of six digits cut short looks so
    (b"rdk:main\n", None), (b"python\n", None), (b"rdk:broker\n", None),
    (b"rdk:broker2 \n", None), (b"\xff" * 64, None),
])
def test_a_thread_names_its_node_only_when_its_name_is_whole(tmp_path, name, node):
    comm = tmp_path / "comm"
    comm.write_bytes(name)
    assert _thread_node(str(comm)) == node


def test_a_thread_gone_names_nothing(tmp_path):
    assert _thread_node(str(tmp_path / "gone")) is None

"""short_command: what the host view and `kmon ps` call a process."""

import pytest

from kmon.short_command import short_command


@pytest.mark.parametrize(("cmdline", "expected"), [
    ("/usr/bin/python3 -u /srv/app/producer.py --topic t", "producer.py"),
    ("python3 -W ignore -m kmon.devtools.workload consumer", "-m kmon.devtools.workload"),
    ("python -c 'import x'", "-c …"),
    ("java -Xmx1g -cp /a.jar:/b.jar com.acme.OrderService --port 1", "com.acme.OrderService"),
    ("/usr/lib/jvm/bin/java -Dx=1 -jar /opt/app/orders-1.2.jar", "orders-1.2.jar"),
    ("java -cp /j/* /src/tests/java/KafkaClientProgram.java consumer", "KafkaClientProgram.java"),
    ("node --require ./otel.js /srv/consumer.js", "consumer.js"),
    ("/usr/bin/kcat -b 127.0.0.1:9092 -C -t t", "kcat"),
    ("", ""),
    ("python 'unbalanced", "'unbalanced"),
])
def test_short_command(cmdline, expected):
    assert short_command(cmdline) == expected


def test_an_empty_command_line_falls_back_to_the_name():
    assert short_command("", "kworker") == "kworker"

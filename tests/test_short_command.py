"""short_command: what the host view and `kmon ps` call a process."""

import pytest

from kmon.short_command import short_command


@pytest.mark.parametrize(("cmdline", "expected"), [
    ("/usr/bin/python3 -u /srv/app/producer.py --topic t", "producer.py"),
    ("python3 -W ignore -m kmon.devtools.workload consumer", "workload consumer"),
    ("/venv/bin/python3 -P -m kmon.devtools.workload producer 127.0.0.1:1,127.0.0.1:2",
     "workload producer"),
    ("python -mhttp.server 8000", "server"),
    ("/venv/bin/python3 /venv/bin/kmon watch", "kmon watch"),
    ("python -c 'import x' 127.0.0.1:43627,127.0.0.1:43628", "python"),
    ("python3 -u - 127.0.0.1:43627,127.0.0.1:43628", "python3"),
    ("python3 app.py /etc/app.conf", "app.py"),
    ("java -Xmx1g -cp /a.jar:/b.jar com.acme.OrderService --port 1", "com.acme.OrderService"),
    ("/usr/lib/jvm/bin/java -Dx=1 -jar /opt/app/orders-1.2.jar", "orders-1.2.jar"),
    ("java -cp /j/* /src/tests/java/KafkaClientProgram.java consumer",
     "KafkaClientProgram.java consumer"),
    ("node --require ./otel.js /srv/consumer.js", "consumer.js"),
    ("/usr/bin/kcat -b 127.0.0.1:9092 -C -t t", "kcat"),
    ("", ""),
    ("python 'unbalanced", "'unbalanced"),
])
def test_short_command(cmdline, expected):
    assert short_command(cmdline) == expected


def test_an_empty_command_line_falls_back_to_the_name():
    assert short_command("", "kworker") == "kworker"

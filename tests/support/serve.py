"""kmon serve, and a real Prometheus server and promtool to read it."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from support.common import wait_for
from support.processes import Child

__all__ = ["require_prometheus", "get", "start_serve", "free_port", "Prometheus", "promtool"]


def require_prometheus() -> None:
    if shutil.which("prometheus") is None or shutil.which("promtool") is None:
        pytest.skip("prometheus and promtool are not installed (Debian: apt-get install "
                    "prometheus)")


def get(url: str, accept: str | None = None) -> tuple[int, str, str]:
    """(status, content type, body) of a GET on loopback."""
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read().decode()
    except TimeoutError as err:
        raise AssertionError(f"no answer from {url} within 60s") from err


def start_serve(*args: str) -> tuple[Child, str]:
    """``kmon serve --listen 127.0.0.1:0 ARGS`` and the address it listens on."""
    child = Child([sys.executable, "-m", "kmon", "serve", "--listen", "127.0.0.1:0", *args])
    line = wait_for(lambda: next((line for line in child.stderr if "/metrics" in line), None)
                    or (child.proc.poll() is not None and
                        pytest.fail(f"kmon serve did not start: {child.stderr}")),
                    "kmon serve listening")
    return child, line.split("http://", 1)[1].split("/metrics", 1)[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Prometheus:
    """A real Prometheus server on loopback scraping ``target`` every second."""

    def __init__(self, target: str, workdir: Path) -> None:
        config = workdir / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                          "scrape_configs:\n  - job_name: kmon\n    static_configs:\n"
                          f"      - targets: ['{target}']\n")
        self.address = f"127.0.0.1:{free_port()}"
        self.child = Child(["prometheus", f"--config.file={config}",
                            f"--storage.tsdb.path={workdir / 'data'}",
                            f"--web.listen-address={self.address}"])
        wait_for(self._ready, "prometheus ready")

    def _ready(self) -> bool:
        try:
            return get(f"http://{self.address}/-/ready")[0] == 200
        except OSError:
            return False

    def query(self, expr: str) -> list[dict]:
        """The instant vector ``expr`` evaluates to now."""
        url = f"http://{self.address}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        answer = json.loads(get(url)[2])
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def stop(self) -> None:
        self.child.stop()


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], input=stdin, capture_output=True, text=True,
                          timeout=120)

"""The agent's HTTP endpoint: ``/metrics`` (Prometheus or OpenMetrics text) and ``/healthz``."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, gzip_accepted

from kmon.errors import UserError
from kmon.export.http_server import BoundedHTTPServer


def parse_listen(text: str) -> tuple[str, int]:
    """'127.0.0.1:9464', '[::1]:9464', 'localhost:9464' -> (host, port); UserError if not."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise UserError(f"--listen {text!r}: expected HOST:PORT, e.g. 127.0.0.1:9464")
    return host, int(port)


# The formats served, each rendered once a poll: the text format and OpenMetrics 1.0.0 and
# 2.0.0. prometheus_client copies the version an Accept header asks for into its answer;
# taken as it came, each new one cost a render and a body kept until the next poll (a
# scraper varying it grew kmon serve ~10 MB a second).
_FORMATS = {version: choose_encoder(f"application/openmetrics-text; version={version}")
            for version in ("1.0.0", "2.0.0")}
_TEXT = choose_encoder("")


def _format(accept: str) -> tuple[Callable, str]:
    """The (encoder, content type) of the served format an Accept header asks for."""
    _, content_type = choose_encoder(accept)
    if not content_type.startswith("application/openmetrics-text"):
        return _TEXT
    return _FORMATS["2.0.0" if "version=2.0.0;" in content_type else "1.0.0"]


class Exposition:
    """/metrics: the registry rendered once per poll and format (text or OpenMetrics, gzip
    or not) and shared by every scrape of that poll; ``generation()`` changes with each.
    ``prepare()``, from the poll thread, renders a new poll in the format last asked for,
    so that a scrape only sends bytes, however busy the poll thread is then."""

    def __init__(self, registry: CollectorRegistry, generation: Callable[[], int]) -> None:
        self.registry, self.generation = registry, generation
        self._lock = threading.Lock()  # concurrent scrapes of one poll wait for one render
        self._rendered: dict[tuple, bytes] = {}
        self._last_asked: tuple[Callable, str, bool] | None = None

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        encoder, content_type = _format(environ.get("HTTP_ACCEPT", ""))
        gzipped = gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", ""))
        self._last_asked = (encoder, content_type, gzipped)
        body = self._body(encoder, content_type, gzipped)
        headers = [("Content-Type", content_type)]
        start_response("200 OK", headers + ([("Content-Encoding", "gzip")] if gzipped else []))
        return [body]

    def prepare(self) -> None:
        """Render the latest poll as the last scrape asked (nothing before a first scrape)."""
        if self._last_asked is not None:
            self._body(*self._last_asked)

    def _body(self, encoder: Callable, content_type: str, gzipped: bool) -> bytes:
        key = (self.generation(), content_type, gzipped)
        with self._lock:
            body = self._rendered.get(key)
            if body is None:
                body = encoder(self.registry)
                body = gzip.compress(body) if gzipped else body
                self._rendered = {k: v for k, v in self._rendered.items() if k[0] == key[0]}
                self._rendered[key] = body
        return body


class MetricsServer:
    """Serves ``metrics`` on ``listen`` from a daemon thread until ``close()``;
    ``healthy()`` decides what ``/healthz`` answers."""

    def __init__(self, listen: str, metrics: Exposition,
                 healthy: Callable[[], tuple[bool, str]]) -> None:
        host, port = parse_listen(listen)
        self.healthy = healthy
        try:
            self.server = BoundedHTTPServer(host, port, self._app(metrics))
        except (OSError, UnicodeError) as err:  # in use, not an address of this host, ...
            raise UserError(f"cannot listen on {listen}: "
                            f"{getattr(err, 'strerror', None) or err}") from err
        shown = f"[{host}]" if ":" in host else host  # an IPv6 address in brackets
        self.address = f"{shown}:{self.server.port}"

    def _app(self, metrics: Callable) -> Callable:
        def app(environ: dict, start_response: Callable) -> Iterable[bytes]:
            path = environ.get("PATH_INFO", "")
            if path == "/metrics":
                return metrics(environ, start_response)
            if path == "/healthz":
                ok, why = self.healthy()
                start_response("200 OK" if ok else "503 Service Unavailable",
                               [("Content-Type", "text/plain; charset=utf-8")])
                return [f"{why}\n".encode()]
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"kmon serves /metrics and /healthz\n"]
        return app

    def close(self) -> None:
        """Stop answering and release the port."""
        self.server.close()


def fresh_within(last_success_s: Callable[[], float | None], max_age_s: float,
                 started_s: float) -> Callable[[], tuple[bool, str]]:
    """/healthz: healthy while the last successful poll is at most ``max_age_s`` old (or,
    before the first, while kmon started less than that long ago)."""
    def healthy() -> tuple[bool, str]:
        last, now = last_success_s(), time.time()
        if last is None:
            return now - started_s <= max_age_s, "starting: no poll has finished yet"
        age = now - last
        return (age <= max_age_s,
                f"last poll {age:.1f}s ago" + ("" if age <= max_age_s else " (stalled)"))
    return healthy

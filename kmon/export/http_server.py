"""A small HTTP/1.1 server for kmon serve that no local user can exhaust.

Anyone on the host may connect to ``/metrics``. One selector thread reads every request
head without blocking: at most ``MAX_PENDING`` connections are read at once (a new one
closes the oldest still unread, once a last read of it found no whole request: idle
connections cannot keep a scraper out, nor close one whose request waits), each has
``READ_DEADLINE_S`` in all to send its request line and headers, which are limited to
``MAX_LINE`` bytes, ``MAX_HEADERS`` headers and ``MAX_HEAD`` bytes in all. A complete
request goes to one of ``WORKERS`` threads, which answers it (``Connection: close``)
within ``WRITE_DEADLINE_S``; at most ``MAX_QUEUED`` wait for them, more get a 503. Memory
and threads stay bounded whatever is sent.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

MAX_PENDING = 64  # connections whose request head is still being read
READ_DEADLINE_S = 5.0  # for the whole request head, not per recv
WRITE_DEADLINE_S = 10.0  # for the whole answer
MAX_LINE = 8 * 1024  # the request line
MAX_HEADERS = 32
MAX_HEAD = 16 * 1024  # request line and headers together
WORKERS = 4
MAX_QUEUED = 64  # complete requests waiting for a worker
TICK_S = 0.2  # how often deadlines are checked

App = Callable[[dict, Callable], Iterable[bytes]]  # a WSGI application (the part kmon uses)


class _Pending:
    """A connection whose request head is being read."""

    __slots__ = ("sock", "head", "deadline")

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.head, self.deadline = sock, bytearray(), time.monotonic() + READ_DEADLINE_S


class BadRequest(Exception):
    """A request head kmon does not answer: its status line says why."""


def parse_head(head: bytes) -> dict:
    """A WSGI environ (method, path, query, ``HTTP_*`` headers) from a request head that
    ends with its blank line; BadRequest if it breaks a limit or is no HTTP request."""
    lines = head.split(b"\r\n")[:-2]
    if len(lines[0]) > MAX_LINE:
        raise BadRequest("414 URI Too Long")
    if len(lines) - 1 > MAX_HEADERS:
        raise BadRequest("431 Request Header Fields Too Large")
    try:
        method, target, version = lines[0].decode("ascii").split(" ")
    except (UnicodeDecodeError, ValueError):
        raise BadRequest("400 Bad Request") from None
    if not version.startswith("HTTP/1."):
        raise BadRequest("505 HTTP Version Not Supported")
    path, _, query = target.partition("?")
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query,
               "SERVER_PROTOCOL": version}
    for line in lines[1:]:
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep or not name.strip() or name != name.strip():
            raise BadRequest("400 Bad Request")
        environ["HTTP_" + name.upper().replace("-", "_")] = value.strip()
    return environ


class BoundedHTTPServer:
    """Serves ``app`` on (``host``, ``port``) from its own threads until ``close()``.
    Raises OSError (or UnicodeError for a bad host name) when it cannot listen."""

    def __init__(self, host: str, port: int, app: App) -> None:
        self.app = app
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.listener.bind((host, port))
            self.listener.listen(socket.SOMAXCONN)
            self.listener.setblocking(False)
        except BaseException:
            self.listener.close()
            raise
        self.port = self.listener.getsockname()[1]
        self._pending: dict[int, _Pending] = {}  # by fd, oldest first
        self._queued = threading.BoundedSemaphore(MAX_QUEUED)
        self._workers = ThreadPoolExecutor(WORKERS, thread_name_prefix="kmon-serve-answer")
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.listener, selectors.EVENT_READ)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kmon-serve-http", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(TICK_S):
                if key.fileobj is self.listener:
                    self._accept()
                else:
                    self._read(self._pending.get(key.fd))
            self._expire()
        for pending in list(self._pending.values()):
            self._drop(pending)

    def _accept(self) -> None:
        for _ in range(MAX_PENDING):  # a turn's; those accepted are read between turns
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of descriptors, say: the oldest unread make room
                if self._pending:
                    self._make_room()
                return
            if len(self._pending) >= MAX_PENDING:
                self._make_room()
            sock.setblocking(False)
            self._pending[sock.fileno()] = _Pending(sock)
            self._selector.register(sock, selectors.EVENT_READ)

    def _make_room(self) -> None:
        """Read the oldest connection still being read, and close it unless that read made
        its request whole (then it is answered): a flood of connections never closes a
        scraper whose request waits unread."""
        oldest = next(iter(self._pending.values()))
        self._read(oldest)
        if self._pending.get(oldest.sock.fileno()) is oldest:
            self._drop(oldest)

    def _read(self, pending: _Pending | None) -> None:
        if pending is None:
            return
        try:
            chunk = pending.sock.recv(MAX_HEAD + 1 - len(pending.head))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(pending)
            return
        pending.head += chunk
        end = pending.head.find(b"\r\n\r\n")
        if end < 0:
            line_end = pending.head.find(b"\r\n")
            if len(pending.head) > MAX_HEAD or (line_end < 0 and len(pending.head) > MAX_LINE):
                self._refuse(pending, "431 Request Header Fields Too Large"
                             if line_end >= 0 else "414 URI Too Long")
            return
        self._forget(pending)
        try:
            environ = parse_head(bytes(pending.head[:end + 4]))
        except BadRequest as err:
            _send_quickly(pending.sock, _answer(str(err), [], b""))
            pending.sock.close()
            return
        if not self._queued.acquire(blocking=False):
            _send_quickly(pending.sock, _answer("503 Service Unavailable", [], b""))
            pending.sock.close()
            return
        pending.sock.setblocking(True)
        self._workers.submit(self._answer, pending.sock, environ)

    def _answer(self, sock: socket.socket, environ: dict) -> None:
        try:
            try:
                status, headers, body = _call(self.app, environ)
            except Exception:  # noqa: BLE001 - one bad answer, not a dead worker
                status, headers, body = "500 Internal Server Error", [], b""
            if environ["REQUEST_METHOD"] == "HEAD":
                body = b""
            deadline = time.monotonic() + WRITE_DEADLINE_S
            data = memoryview(_answer(status, headers, body))
            while data:
                sock.settimeout(max(0.001, deadline - time.monotonic()))
                data = data[sock.send(data):]
        except OSError:
            pass  # the scraper left, or read too slowly
        finally:
            sock.close()
            self._queued.release()

    def _expire(self) -> None:
        now = time.monotonic()
        for pending in list(self._pending.values()):
            if pending.deadline > now:
                break  # oldest first: the rest are younger
            self._refuse(pending, "408 Request Timeout")

    def _refuse(self, pending: _Pending, status: str) -> None:
        self._forget(pending)
        _send_quickly(pending.sock, _answer(status, [], b""))
        pending.sock.close()

    def _forget(self, pending: _Pending) -> None:
        self._pending.pop(pending.sock.fileno(), None)
        self._selector.unregister(pending.sock)

    def _drop(self, pending: _Pending) -> None:
        self._forget(pending)
        pending.sock.close()

    def close(self) -> None:
        """Stop answering and release the port."""
        self._stop.set()
        self._thread.join()
        self._workers.shutdown(wait=True)
        self._selector.close()
        self.listener.close()


def _call(app: App, environ: dict) -> tuple[str, list[tuple[str, str]], bytes]:
    said: list = []
    body = b"".join(app(environ, lambda status, headers: said.extend((status, headers))))
    return said[0], said[1], body


def _answer(status: str, headers: list[tuple[str, str]], body: bytes) -> bytes:
    head = [f"HTTP/1.1 {status}", *(f"{name}: {value}" for name, value in headers),
            f"Content-Length: {len(body)}", "Connection: close", "", ""]
    return "\r\n".join(head).encode("latin-1") + body


def _send_quickly(sock: socket.socket, data: bytes) -> None:
    """What fits in the socket's buffer now (a short error answer), never waiting."""
    try:
        sock.setblocking(False)
        sock.send(data)
    except OSError:
        pass

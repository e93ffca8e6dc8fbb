"""One HTTP exchange that a live service cannot stretch: bounded in time and in bytes, never redirected.

Where it sits: the HTTP adapter (retrieval/systems/http.py) sends every request through `exchange`, on
its kept-alive `http.client` connection.

- **Time**: the whole exchange (sending, the status line, the headers, the body) ends by its deadline.
  A socket timeout bounds each read, not their sum, so a service dripping one byte a second would hold
  a request for ever; one watchdog thread for the process shuts down the socket of an exchange that
  outlives its deadline, and the exchange raises `DeadlinePassed` (a `TimeoutError`). Connecting is one
  socket operation, bounded by the connection's own timeout.
- **Bytes**: the body is read up to `max_bytes`; a larger one (by its `Content-Length`, or as it streams
  in) raises `TooLarge` without reading the rest, so memory stays bounded whatever the service sends.
- **Redirects** are answers like any other status (http.client follows none): the request, and its
  headers with their secrets, never reach an address the config does not name.

`url_problems` is what a service URL may be: http(s), a host, a port in 1..65535, and no `user:password@`
(a password in a URL would be written to config.yaml; secrets go in `{env:NAME}` headers).
"""

from __future__ import annotations

import heapq
import http.client
import itertools
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass


class DeadlinePassed(TimeoutError):
    """The exchange was still running at its deadline (its socket was shut down)."""


class TooLarge(ValueError):
    """The answer's body is over the byte cap."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    retry_after: str | None
    location: str | None
    will_close: bool


class _Alarm:
    __slots__ = ("sock", "done", "fired")

    def __init__(self, sock: socket.socket | None):
        self.sock = sock
        self.done = False
        self.fired = False


class _Watchdog:
    """Deadlines of the exchanges in flight, in a heap; one daemon thread shuts down the late ones.

    Arming costs a lock and a heap push; a finished exchange only marks its alarm done (it leaves the
    heap when its deadline comes), so the thread wakes once per exchange, `timeout_s` later."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, _Alarm]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, deadline: float, sock: socket.socket | None) -> _Alarm:
        alarm = _Alarm(sock)
        with self._cond:
            heapq.heappush(self._heap, (deadline, next(self._order), alarm))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="memeval-http-deadlines", daemon=True)
                self._thread.start()
            elif self._heap[0][2] is alarm:  # earlier than what the thread sleeps towards
                self._cond.notify()
        return alarm

    def disarm(self, alarm: _Alarm) -> bool:
        """Mark the exchange finished; whether its deadline had already fired."""
        with self._cond:
            alarm.done = True
            alarm.sock = None
            return alarm.fired

    def _run(self) -> None:
        with self._cond:
            while True:
                while self._heap and self._heap[0][2].done:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                wait = self._heap[0][0] - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                _, _, alarm = heapq.heappop(self._heap)
                alarm.fired = True
                if alarm.sock is not None:
                    try:  # the base class's shutdown: for a TLS socket too, the fd itself, not the TLS state
                        socket.socket.shutdown(alarm.sock, socket.SHUT_RDWR)
                    except OSError:
                        pass  # already closed: the exchange has ended anyway


_WATCHDOG = _Watchdog()


def exchange(
    connection: http.client.HTTPConnection,
    method: str,
    path: str,
    body: bytes | None,
    headers: dict[str, str],
    deadline: float,
    max_bytes: int,
) -> Answer:
    """Send one request on a connected `connection` and read its answer, by `deadline` (time.monotonic())
    and within `max_bytes` of body (module docstring). The caller drops the connection after any error."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise DeadlinePassed()
    connection.sock.settimeout(remaining)  # a silent service: the read itself gives up at the deadline
    alarm = _WATCHDOG.arm(deadline, connection.sock)
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        length = response.getheader("Content-Length")
        if length is not None and length.strip().isdigit() and int(length) > max_bytes:
            raise TooLarge(f"an answer of {int(length):,} bytes (Content-Length)")
        payload = response.read(max_bytes + 1)
        if len(payload) > max_bytes:
            raise TooLarge(f"an answer of more than {max_bytes:,} bytes")
        if response.length:  # the service closed before its Content-Length (as `read()` would raise)
            raise http.client.IncompleteRead(payload, response.length)
    except BaseException:
        if _WATCHDOG.disarm(alarm):
            raise DeadlinePassed() from None
        raise
    if _WATCHDOG.disarm(alarm):  # the socket was shut down: what was read may be cut short
        raise DeadlinePassed()
    return Answer(
        response.status,
        payload,
        response.getheader("Retry-After"),
        response.getheader("Location"),
        bool(response.will_close),
    )


def url_problems(key: str, url: object) -> list[str]:
    """What is wrong with a service URL (module docstring), each naming `key`; never quotes a password."""
    text = str(url)
    try:
        parsed = urllib.parse.urlsplit(text)
        if parsed.username is not None or parsed.password is not None:
            return [
                f"{key}: holds a user name or password before '@'; memeval never sends credentials in a "
                "URL (the config, and so config.yaml, would hold them): send them as a header from the "
                'environment, e.g. headers: {Authorization: "Bearer {env:MY_API_KEY}"} (docs/live_systems.md)'
            ]
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            return [f"{key}: expected http(s)://host[:port][/prefix], got {text!r}"]
        port = parsed.port
    except ValueError as err:  # a port that is not a number or out of range, a bad IPv6 literal
        return [f"{key}: {err} in {text!r} (a port is 1 to 65535)"]
    if port == 0:
        return [f"{key}: port 0 in {text!r} (a port is 1 to 65535)"]
    return []

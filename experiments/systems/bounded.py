"""One HTTP exchange that a live service cannot stretch: bounded in time and in bytes, never redirected.

Where it sits: the HTTP adapter (experiments/systems/http.py) makes its kept-alive connections with
`connect` and sends every request through `exchange`.

- **Time**: the whole exchange (sending, the status line, the headers, the body) ends by its deadline.
  A socket timeout bounds each read, not their sum, so a service dripping one byte a second would hold
  a request for ever: the connection's socket (`_DeadlineSocket`, or `_DeadlineSSLSocket` for https,
  through `SSLContext.sslsocket_class`) gives each read only the time left until the deadline, and
  raises `DeadlinePassed` (a `TimeoutError`) once it has gone. Connecting is one socket operation,
  bounded by the connection's timeout.
- **Bytes**: the body is read up to `max_bytes`; a larger one (by its `Content-Length`, or as it streams
  in) raises `TooLarge` without reading the rest, so memory stays bounded whatever the service sends.
- **Redirects** are answers like any other status (http.client follows none): the request, and its
  headers with their secrets, never reach an address the config does not name.

`url_problems` is what a service URL may be: http(s), a host, a port in 1..65535, and no `user:password@`
(a password in a URL would be written to config.yaml; secrets go in `{env:NAME}` headers).
"""

from __future__ import annotations

import http.client
import math
import socket
import ssl
import time
import urllib.parse
from dataclasses import dataclass


class DeadlinePassed(TimeoutError):
    """The exchange was still running at its deadline."""


class TooLarge(ValueError):
    """The answer's body is over the byte cap."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    retry_after: str | None
    location: str | None
    will_close: bool


def _time_left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise DeadlinePassed()
    return left


class _DeadlineSocket(socket.socket):
    """A socket whose every read waits at most until `deadline` (time.monotonic()), not `timeout` each."""

    deadline = math.inf

    def recv_into(self, buffer, nbytes=0, flags=0):  # what http.client's reads come down to
        if self.deadline < math.inf:
            self.settimeout(_time_left(self.deadline))
        return super().recv_into(buffer, nbytes, flags)


class _DeadlineSSLSocket(ssl.SSLSocket):
    deadline = math.inf

    def recv_into(self, buffer, nbytes=None, flags=0):
        if self.deadline < math.inf:
            self.settimeout(_time_left(self.deadline))
        return super().recv_into(buffer, nbytes, flags)


class _Connection(http.client.HTTPConnection):
    def connect(self) -> None:
        super().connect()
        plain = self.sock  # the same connected socket, as the class that bounds its reads
        self.sock = _DeadlineSocket(plain.family, plain.type, plain.proto, fileno=plain.detach())
        self.sock.settimeout(self.timeout)


def connect(
    url: urllib.parse.SplitResult, timeout_s: float, ca_file: str | None
) -> http.client.HTTPConnection:
    """A connected http(s) connection to `url`'s host whose exchanges `exchange` can bound; https trusts
    the system's CAs, or `ca_file`'s instead."""
    if url.scheme == "https":
        context = ssl.create_default_context(cafile=ca_file)
        context.sslsocket_class = _DeadlineSSLSocket
        connection = http.client.HTTPSConnection(url.hostname, url.port, timeout=timeout_s, context=context)
    else:
        connection = _Connection(url.hostname, url.port, timeout=timeout_s)
    connection.connect()
    # No Nagle delay: a request is small and its answer is awaited at once.
    connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return connection


def exchange(
    connection: http.client.HTTPConnection,
    method: str,
    path: str,
    body: bytes | None,
    headers: dict[str, str],
    deadline: float,
    max_bytes: int,
) -> Answer:
    """Send one request on a connection made by `connect` and read its answer, by `deadline`
    (time.monotonic()) and within `max_bytes` of body (module docstring). The caller drops the
    connection after any error: it may be part-way through an answer."""
    connection.sock.deadline = deadline
    connection.sock.settimeout(_time_left(deadline))  # sending (sendall's timeout is its total)
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
    return Answer(
        response.status,
        payload,
        response.getheader("Retry-After"),
        response.getheader("Location"),
        bool(response.will_close),
    )


def url_problems(key: str, url: object) -> list[tuple[str, str]]:
    """(key, problem) for what is wrong with a service URL (module docstring); never quotes a password."""
    text = str(url)
    try:
        parsed = urllib.parse.urlsplit(text)
        if parsed.username is not None or parsed.password is not None:
            return [
                (
                    key,
                    "holds a user name or password before '@'; memeval never sends credentials in a URL (the "
                    "config, and so config.yaml, would hold them): send them as a header from the "
                    'environment, e.g. headers: {Authorization: "Bearer {env:MY_API_KEY}"} '
                    "(docs/live_systems.md)",
                )
            ]
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            return [(key, f"expected http(s)://host[:port][/prefix], got {text!r}")]
        port = parsed.port
    except ValueError as err:  # a port that is not a number or out of range, a bad IPv6 literal
        return [(key, f"{err} in {text!r} (a port is 1 to 65535)")]
    if port == 0:
        return [(key, f"port 0 in {text!r} (a port is 1 to 65535)")]
    return []

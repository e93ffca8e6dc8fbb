"""Secrets of the live-system adapters: read from the environment, never written anywhere.

A YAML adapter names a secret as `{env:NAME}` (an HTTP header value, an MCP server's environment); the
config, and so config.yaml, `.hydra/`, MLflow params and the adapter's fingerprint, holds the placeholder.
What a service sends back can still carry a value (a service that echoes its request headers in an
error, a hit's text), so every message the adapters raise and every hit text they return is redacted:

- `env_value(NAME, where)` reads a secret, refusing a missing one and one that holds a line break or NUL
  (http.client would put the whole value in its traceback) with a `SecretError` naming the variable,
  never the value;
- `register(NAME)` makes a variable's value a known secret (adapters register theirs when built);
- `redact(text)` replaces every known secret's value, as sent and as JSON would escape it, by
  `{env:NAME}`; `LiveSystemError` redacts its message with it, so no adapter error can carry a value;
- `quote(text, limit)` is what an error may quote of a service's text: redacted *before* it is cut, so a
  cut never leaves part of a secret.

The known names are process-wide on purpose: a message is made deep in helpers shared by every adapter
(JSON paths, hits), and the secret of any adapter in the process must be hidden from all of them.
"""

from __future__ import annotations

import functools
import json
import os
import re
import threading
from typing import Any

ENV_PLACEHOLDER = re.compile(r"\{env:([A-Za-z_][A-Za-z0-9_]*)\}")
# What no header value may hold: a line break would end the header (and http.client refuses it by
# printing the value), NUL ends it in many servers.
LINE_BREAKS = re.compile(r"[\r\n\x00]")

_KNOWN: set[str] = set()  # names, never values: a value is read from the environment when redacting
_LOCK = threading.Lock()


class SecretError(ValueError):
    """A secret that cannot be used (missing, or not a valid header value); the message names the variable."""


def register_placeholders(*templates: Any) -> None:
    """Every `{env:NAME}` named in these templates becomes a known secret."""
    for template in templates:
        for name in ENV_PLACEHOLDER.findall(str(template)):
            register(name)


def register(name: str) -> None:
    with _LOCK:
        _KNOWN.add(name)


def env_value(name: str, where: str) -> str:
    """The value of the environment variable `name` (a known secret from now on), for `where`
    (`header Authorization`); missing or holding CR, LF or NUL -> SecretError naming the variable."""
    register(name)
    value = os.environ.get(name)
    if value is None:
        raise SecretError(f"{where}: environment variable {name} is not set")
    if LINE_BREAKS.search(value):
        raise SecretError(
            f"{where}: environment variable {name} holds a line break or NUL, which a header value "
            "cannot carry (its value is not shown); set it to the key alone"
        )
    return value


def redact(text: str) -> str:
    """`text` with the value of every known secret replaced by `{env:NAME}`."""
    if not _KNOWN:
        return text
    with _LOCK:
        names = sorted(_KNOWN)
    for name in names:
        value = os.environ.get(name)
        if not value:
            continue
        for form in _forms(value):
            if form in text:
                text = text.replace(form, f"{{env:{name}}}")
    return text


@functools.lru_cache(maxsize=64)
def _forms(value: str) -> tuple[str, ...]:
    """A value as a service may echo it: as sent, and as JSON writers escape it (`"`, `\\`, `/`)."""
    escaped = json.dumps(value, ensure_ascii=False)[1:-1]
    return tuple(dict.fromkeys((value, escaped, json.dumps(value)[1:-1], escaped.replace("/", "\\/"))))


def quote(text: str, limit: int = 300) -> str:
    """What an error may quote of a service's text: redacted, then cut to `limit` characters."""
    text = redact(text)
    return text if len(text) <= limit else text[:limit] + "..."


def describe(value: Any) -> str:
    """A short, bounded and redacted description of a JSON value for an error message (a nested value
    is described by its kind and size, never printed: it may be deep or huge)."""
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    if isinstance(value, str):
        return repr(quote(value, 60))
    if isinstance(value, list):
        return f"a list of {len(value)} items"
    if isinstance(value, dict):
        return f"an object of {len(value)} keys"
    return type(value).__name__

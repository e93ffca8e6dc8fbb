"""An MCP memory server as a `MemorySystem`: tools named and mapped in YAML (conf/system/mcp_*.yaml).

    memeval-run variant=system system=mcp_memeval_serve

Where it sits: `SystemRetriever` (experiments/systems/retriever.py) wraps it as one channel. It talks to a
server exposing memory tools over the Model Context Protocol with the official `mcp` SDK's client, over

- `stdio`: the adapter starts `command` as its subprocess (the server lives as long as the adapter), or
- `http`: streamable HTTP at `url` (a server someone else runs).

Each operation (`search`, `ingest` required; `reset`, `count` optional) is `{tool, arguments}`, and
`count` also has `path_in_response`. Arguments are the HTTP adapter's JSON templates with the same
placeholders, filled by the same engine (experiments/systems/templates.py); a tool's answer is its
structured content, else its text content read as JSON, and `results` names JSON paths into the search
answer exactly as for HTTP (`read_path`). A tool error (`isError`) or an answer that is not JSON is a
`LiveSystemError` naming the operation (and the query id); counts go to `stats`.

The SDK is async, the protocol is blocking: the client lives on a private event loop in its own thread.
One owner task enters and leaves the client's context (anyio requires both in the same task); every
call is a coroutine submitted to that loop, so the retriever's worker threads may search concurrently
over one session.
"""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import json
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from experiments.systems import bounded, secrets
from experiments.systems.protocol import Hit, LiveSystemError, SearchRequest, poll_until_searchable
from experiments.systems.stats import SystemStats
from experiments.systems.templates import (
    adapter_problems,
    check_scope_fields,
    fill,
    fill_env,
    memory_records,
    parse_json,
    read_count,
    read_hits,
    search_values,
)
from retrieval.stage import FieldError, Range, own_range_problems
from retrieval.types import Memory

OPERATIONS = ("search", "ingest", "reset", "count")


class _Session:
    """The MCP client on its private loop thread (module docstring)."""

    def __init__(self, target: Any, timeout_s: float, connect_timeout_s: float):
        self.timeout_s = timeout_s
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="mcp-client", daemon=True)
        self.thread.start()
        self.client: Any = None
        self._ready: asyncio.Future | None = None
        self._stop: asyncio.Event | None = None
        self._owner = asyncio.run_coroutine_threadsafe(self._own(target), self.loop)
        try:
            self._submit(self._wait_ready(), connect_timeout_s)
        except BaseException:
            self.close()
            raise

    async def _own(self, target: Any) -> None:
        from mcp import Client

        self._ready = self.loop.create_future()
        self._stop = asyncio.Event()
        try:
            async with Client(target, read_timeout_seconds=self.timeout_s) as client:
                self.client = client
                self._ready.set_result(None)
                await self._stop.wait()
        except BaseException as err:  # noqa: BLE001 (handed to whoever waits for the connection)
            if not self._ready.done():
                self._ready.set_exception(err)
            raise

    async def _wait_ready(self) -> None:
        while self._ready is None:  # the owner task has not run its first line yet
            await asyncio.sleep(0.001)
        await self._ready

    def _submit(self, coroutine: Any, timeout: float) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def call(self, tool: str, arguments: Mapping[str, Any]) -> Any:
        # The SDK's own read timeout ends the request; the outer bound only guards a wedged loop.
        return self._submit(self.client.call_tool(tool, dict(arguments)), self.timeout_s + 5.0)

    def tool_names(self) -> set[str]:
        listed = self._submit(self.client.list_tools(), self.timeout_s + 5.0)
        return {t.name for t in listed.tools}

    def close(self) -> None:
        if self._stop is not None and self.loop.is_running():
            self.loop.call_soon_threadsafe(self._stop.set)
            try:
                self._owner.result(10.0)  # the client's context exits: the stdio subprocess ends
            except Exception:  # noqa: BLE001, S110 (closing: a failed exit must not hide the caller's error)
                pass
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10.0)
        if not self.loop.is_running():
            self.loop.close()


class McpState:
    """What an McpSystem holds while it runs (never config): its counts, and the session (opened on first
    use, under `lock`: the retriever's threads may all ask at once)."""

    def __init__(self) -> None:
        self.stats = SystemStats()
        self.session: _Session | None = None
        self.lock = threading.Lock()


@dataclass(frozen=True, kw_only=True)
class McpSystem:
    """A memory service over MCP, configured by tool names, argument templates and JSON paths; its run-time
    state is `state`, an `McpState` made with it."""

    name: ClassVar[str] = "mcp"  # system=...: its base is system/dataclass/mcp (configure/nodes.py)
    ranges: ClassVar[Mapping[str, Range]] = {
        "timeout_s": Range(gt=0),
        "connect_timeout_s": Range(gt=0),
        "ingest_batch": Range(ge=1),
        "searchable_timeout_s": Range(ge=0),
        "searchable_poll_s": Range(gt=0),
    }

    transport: Literal["stdio", "http"]
    command: Sequence[str] = ()  # stdio: the server's command; `python` means this interpreter
    args: Sequence[str] = ()  # stdio: appended to command (e.g. the served variant's overrides)
    env: Mapping[str, str] = field(default_factory=dict)  # stdio: extra environment; `{env:NAME}` copies one
    cwd: str | None = None  # stdio: the server's working directory
    url: str | None = None  # http: the streamable-HTTP endpoint (http://127.0.0.1:8765/mcp)
    tools: Mapping[str, Mapping[str, Any]]  # operation -> {tool, arguments[, path_in_response]}
    memory: Mapping[str, Any] | str = field(default_factory=lambda: {"id": "{id}", "text": "{text}"})
    results: Mapping[str, str | None] = field(
        default_factory=lambda: {"hits": "results", "id": "id", "score": "score", "text": "text"}
    )
    timeout_s: float = 60.0  # one tool call
    connect_timeout_s: float = 120.0  # start (a stdio server may load a model) and handshake
    ingest_batch: int = 500
    searchable_timeout_s: float = 60.0
    searchable_poll_s: float = 0.05
    state: McpState = field(default_factory=McpState, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        problems = []
        if self.transport == "stdio" and not self.command:
            problems.append(("command", "the stdio transport needs the server's command"))
        if self.transport == "http":
            problems += bounded.url_problems("url", self.url or "")
        secrets.register_placeholders(*self.env.values())  # a value copied in is a secret: never quoted
        if self.transport not in ("stdio", "http"):
            problems.append(("transport", f"'stdio' or 'http', not {self.transport!r}"))
        problems += own_range_problems(self)
        problems += adapter_problems("tools", self.tools, OPERATIONS, ("tool", "{tool, arguments}"), self)
        if problems:
            raise FieldError(problems)

    @property
    def stats(self) -> SystemStats:
        """What talking to the server cost so far (read into the run's `system` section)."""
        return self.state.stats

    def fingerprint(self) -> str:
        """What the server answers by: tools, argument templates, paths. Not the command, URL or
        environment (a cassette recorded against one deployment replays for another), nor timeouts."""
        identity = {"tools": self.tools, "memory": self.memory, "results": self.results}
        text = json.dumps(identity, sort_keys=True, default=str)
        return hashlib.sha256(f"McpSystem|{text}".encode()).hexdigest()[:16]

    # --- the session --------------------------------------------------------------------------------

    def _target(self) -> Any:
        if self.transport == "http":
            return self.url
        from mcp import StdioServerParameters

        env = {**os.environ, **{str(k): fill_env(v, f"mcp env {k}") for k, v in self.env.items()}}
        argv = [str(a) for a in (*self.command, *self.args)]
        if argv[0] == "python":  # the server runs in the harness's own environment (its venv)
            argv[0] = sys.executable
        return StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=self.cwd)

    def _where(self) -> str:
        return self.url if self.transport == "http" else " ".join(str(a) for a in (*self.command, *self.args))

    @property
    def session(self) -> _Session:
        with self.state.lock:
            if self.state.session is None:
                try:
                    self.state.session = _Session(self._target(), self.timeout_s, self.connect_timeout_s)
                    # Nothing in a run calls close(): at exit, the stdio server is stopped cleanly.
                    atexit.register(self.close)
                except LiveSystemError:
                    raise
                except Exception as err:  # noqa: BLE001 (the SDK raises ExceptionGroups, OSErrors...)
                    raise LiveSystemError(
                        f"the MCP memory server ({self.transport}: {self._where()}) is not reachable: "
                        f"{_reason(err)} (nothing was run)"
                    ) from None
            return self.state.session

    def _call(self, operation: str, values: Mapping[str, Any], what: str) -> Any:
        """Call an operation's tool with its filled arguments; its answer as JSON."""
        spec = self.tools[operation]
        arguments = fill(spec.get("arguments") or {}, values)
        self.stats.add("requests")
        try:
            result = self.session.call(str(spec["tool"]), arguments)
        except LiveSystemError:
            self.stats.add("errors")
            raise
        except (TimeoutError, FutureTimeout):
            self.stats.add("timeouts")
            raise LiveSystemError(
                f"{what}: tool {spec['tool']!r} gave no answer within {self.timeout_s:g} s"
            ) from None
        except Exception as err:  # noqa: BLE001 (MCPError, a dead subprocess's stream errors...)
            self.stats.add("errors")
            if "timed out" in str(err).lower():
                self.stats.add("timeouts")
            raise LiveSystemError(f"{what}: tool {spec['tool']!r} failed: {_reason(err)}") from None
        text = " ".join(getattr(c, "text", "") for c in result.content or [])
        if result.is_error:
            self.stats.add("errors")
            raise LiveSystemError(
                f"{what}: tool {spec['tool']!r} answered an error: {secrets.quote(text, 300)}"
            )
        if result.structured_content is not None:
            return result.structured_content
        try:
            return parse_json(text, f"{what}: tool {spec['tool']!r} answered")
        except LiveSystemError:
            self.stats.add("errors")
            raise

    # --- the MemorySystem protocol ------------------------------------------------------------------

    def check_available(self) -> None:
        """At start, before any work: the server starts (stdio) or answers (http) and has the tools."""
        try:
            offered = self.session.tool_names()
        except LiveSystemError:
            raise
        except Exception as err:  # noqa: BLE001
            raise LiveSystemError(
                f"the MCP memory server ({self._where()}) cannot list its tools: {_reason(err)}"
            ) from None
        missing = sorted({str(s["tool"]) for s in self.tools.values()} - offered)
        if missing:
            raise LiveSystemError(
                f"the MCP memory server ({self._where()}) has no tool {', '.join(missing)} "
                f"(it offers {', '.join(sorted(offered))}): check system.tools"
            )

    def check_scopes(self, scopes: Sequence[Mapping[str, str]]) -> None:
        """Before any call: every `{scope.<name>}` of the tools and the memory template is a key of every
        scope (templates.check_scope_fields)."""
        templates = {f"system.adapter.tools.{k}": v for k, v in self.tools.items()}
        check_scope_fields({**templates, "system.adapter.memory": self.memory}, scopes)

    def reset(self, scope: Mapping[str, str]) -> None:
        if "reset" in self.tools:
            self._call("reset", {"scope": dict(scope)}, f"reset of scope {dict(scope)}")

    def ingest(self, scope: Mapping[str, str], memories: Sequence[Memory]) -> None:
        for start in range(0, len(memories), self.ingest_batch):
            batch = memories[start : start + self.ingest_batch]
            self._call(
                "ingest",
                {"scope": dict(scope), "memories": memory_records(self.memory, scope, batch)},
                f"ingest of scope {dict(scope)} (memories {start + 1}-{start + len(batch)})",
            )

    def count(self, scope: Mapping[str, str]) -> Any:
        """What the `count` tool says the scope holds (None without one): the searchable wait polls it, and
        a resumed record run checks with it that the server kept the scope (cassette.py)."""
        if "count" not in self.tools:
            return None
        where = f"count of scope {dict(scope)}"
        path = str(self.tools["count"].get("path_in_response", "count"))
        return read_count(self._call("count", {"scope": dict(scope)}, where), path, where, self.stats)

    def wait_until_searchable(self, scope: Mapping[str, str], memories: Sequence[Memory]) -> float:
        """Poll `count` until it reaches the memories ingested (bounded by searchable_timeout_s)."""
        if "count" not in self.tools:
            return 0.0
        return poll_until_searchable(
            lambda: self.count(scope), len(memories), self.searchable_timeout_s, self.searchable_poll_s,
            f"scope {dict(scope)}", "system.searchable_timeout_s",
        )  # fmt: skip

    def search(self, request: SearchRequest) -> list[Hit]:
        where = f"query {request.query_id}"
        return read_hits(self._call("search", search_values(request), where), self.results, where, self.stats)

    def close(self) -> None:
        session, self.state.session = self.state.session, None
        if session is not None:
            session.close()


def _reason(err: BaseException) -> str:
    """The innermost message of an error (the SDK wraps transport failures in ExceptionGroups)."""
    while isinstance(err, BaseExceptionGroup) and err.exceptions:
        err = err.exceptions[0]
    return f"{type(err).__name__}: {err}"

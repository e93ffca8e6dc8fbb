"""memeval-serve's MCP face: a memeval variant served as Model Context Protocol tools.

    memeval-serve --mcp stdio variant=dense          (what the MCP adapter starts as its subprocess)
    memeval-serve --mcp http --port 8765 variant=hybrid    (streamable HTTP at http://127.0.0.1:8765/mcp)

Where it sits: the same `MemoryService` core as the HTTP face (experiments/serve/service.py), exposed
with the official `mcp` SDK's `MCPServer` as four tools, so `experiments/systems/mcp.py` (the MCP
adapter) is tested against a real MCP server, and a team's MCP memory server and memeval's reference
variants go through the very same client path:

    ingest(scope, memories)                      -> {"stored": n, "duplicates_refused": n}
    search(text, scope, k, as_of?, config_override?, query_id?)
                                                 -> {"results": [{"id", "score", "text"}, ...]}
    reset(scope)                                 -> {"forgotten": n}
    count(scope)                                 -> {"count": n}   (what the adapter's searchable wait polls)

A request the service refuses (a bad record, an unknown override key, an override that is not a plain
value for a declared stage field: experiments/serve/service.py) is a tool error carrying the service's
message. Transports: stdio (the adapter starts this module as its subprocess) or streamable
HTTP on 127.0.0.1 (path `/mcp`), behind the same Host, Origin, token and content-type checks as the
HTTP face. Results are JSON text: a float's shortest repr reads back to the same
float, so scores cross the wire exactly (the parity test compares run.trec byte for byte).
"""

from __future__ import annotations

import sys
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings

from experiments.serve.http_face import Guard
from experiments.serve.service import MemoryService, ServiceError

TRANSPORTS = ("stdio", "http")


def build_server(service: MemoryService) -> Any:
    """An `MCPServer` whose tools are the service's operations."""
    app = MCPServer(
        "memeval-serve",
        instructions=f"memeval variant {service.describe()['variant']} as a memory service",
        log_level="WARNING",
    )

    def refused(err: ServiceError) -> ToolError:
        return ToolError(str(err))  # the client sees the service's own message, not a generic crash

    @app.tool(description="Store memories under a scope; an id the scope already holds is refused.")
    def ingest(scope: dict[str, str], memories: list[dict[str, Any]]) -> dict[str, Any]:
        try:
            return service.ingest(scope, memories)
        except ServiceError as err:
            raise refused(err) from None

    @app.tool(description="The variant's top k memories of the scope for a query, best first.")
    def search(
        text: str,
        scope: dict[str, str],
        k: int,
        as_of: str | None = None,
        config_override: dict[str, Any] | None = None,
        query_id: str = "query",
    ) -> dict[str, Any]:
        try:
            hits = service.search(
                text, scope, k, as_of=as_of, config_override=config_override, query_id=query_id
            )
        except ServiceError as err:
            raise refused(err) from None
        return {"results": [{"id": h.id, "score": h.score, "text": h.text} for h in hits]}

    @app.tool(description="Forget every memory of a scope.")
    def reset(scope: dict[str, str]) -> dict[str, Any]:
        return {"forgotten": service.reset(scope)}

    @app.tool(description="How many memories the scope holds (all of them are searchable).")
    def count(scope: dict[str, str]) -> dict[str, Any]:
        return {"count": service.count(scope)}

    return app


def serve(
    service: MemoryService, transport: str, *, host: str = "127.0.0.1", port: int = 8765, guard: Any = None
) -> None:
    """Run the MCP face until stdin closes (stdio) or the process is stopped (http). Over HTTP it sits
    behind the HTTP face's `Guard` (Host, Origin, token, JSON POSTs: experiments/serve/http_face.py)."""
    if transport not in TRANSPORTS:
        raise ValueError(f"MCP transport must be one of {TRANSPORTS}, got {transport!r}")
    app = build_server(service)
    if transport == "stdio":
        app.run("stdio")  # the SDK points fd 1 at stderr while serving: stray prints miss the wire
        return
    # The SDK's own Host/Origin check is off: the Guard makes that check (and the token and content-type
    # checks) once, with the same rules on both faces, and an --allow-origin it lets through must not be
    # refused again by the SDK's narrower default.
    starlette = app.streamable_http_app(
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False), host=host
    )
    print(f"memeval-serve (MCP, streamable HTTP): http://{host}:{port}/mcp", file=sys.stderr, flush=True)
    uvicorn.run((guard or Guard.serving(host)).wrap(starlette), host=host, port=port, log_level="warning")

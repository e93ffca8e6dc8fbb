"""`memeval-serve`: serve a memeval variant as a memory service on 127.0.0.1 (docs/live_systems.md).

    memeval-serve variant=exp05 --port 8000
    memeval-serve variant=hybrid --port 8000 --state-dir outputs/serve-state     # survives a restart
    memeval-serve --mcp stdio variant=dense       # the MCP face instead (experiments/serve/mcp_app.py)

Positional arguments are `memeval-run` config overrides (variant=..., stage.x.y=..., cache_dir=...): the
served variant is the one `memeval-run <overrides>` would score, so a served run gives the in-process
run's ranking. `--reject-fraction`, `--retry-after`, `--search-delay-ms` inject faults, for tests and
benchmarks only. Exit 2 on a bad config (nothing served). The safety rules (SAFETY, shown by --help) are
enforced by experiments/serve/service.py (overrides) and http_face.py's Guard (who may ask).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence

from experiments.exit_codes import BAD_INPUT, RULE, ArgumentParser, console_script

SAFETY = """safety: memeval-serve runs no code a client sends.
  - A config_override is a plain value (number, boolean, string, or a list of those) for a declared
    value field of a stage the served variant runs (a key of experiments/serve/override_keys.yaml or
    stage.<name>.<field>), checked against the field's type and range as a command-line override is.
    An object, a `_target_`, an interpolation (`${...}`, `${oc.env:...}`) or any other key is a 400
    naming the key; nothing a client sends is resolved or instantiated.
  - It listens on 127.0.0.1 unless --host says otherwise, and answers only requests whose Host header
    names it (127.0.0.1, localhost, [::1], the --host address or an --allow-host name, with its port:
    421 otherwise, against DNS rebinding); a browser Origin only when --allow-origin names it (403);
    a POST only as Content-Type: application/json (415); a request sending Host, Content-Type,
    Origin or Authorization more than once is refused (400).
  - --token-env NAME asks every request for `Authorization: Bearer <token>`, the token read from the
    environment variable NAME (401 otherwise; compared in constant time; never printed; a token blank
    once stripped is refused at start); without it GET /health answers only {"status": "ok"}. Set
    one before binding wider than loopback.
  - A malformed request (bad JSON, nesting past the parser, a bad k, scope or record) is a 4xx with a
    message, never a 500.
  The MCP face over HTTP (--mcp http) follows the same rules."""


def parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="memeval-serve",
        description="Serve a memeval variant as a memory service (an HTTP API in memeval-serve's own shape "
        "and AtomicMemory's: system=memeval_serve or system=atomicmemory; or MCP tools).",
        epilog=f"{SAFETY}\n\n{RULE}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("overrides", nargs="*", help="memeval-run config overrides, e.g. variant=exp05")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--state-dir", default=None, help="keep stored memories here across restarts")
    p.add_argument(
        "--mcp",
        choices=("stdio", "http"),
        default=None,
        help="serve the MCP face instead (tools ingest, search, reset, count): stdio, or HTTP at /mcp",
    )
    p.add_argument("--override-keys", default=None, help="YAML table config_override key -> stage field")
    who = p.add_argument_group("who may ask (see safety below)")
    who.add_argument(
        "--token-env", metavar="NAME", help="require `Authorization: Bearer <$NAME>` on each request"
    )
    who.add_argument(
        "--allow-origin", action="append", default=[], metavar="ORIGIN", help="a browser origin to answer"
    )
    who.add_argument(
        "--allow-host", action="append", default=[], metavar="NAME", help="another Host name to answer"
    )
    faults = p.add_argument_group("fault injection (tests and benchmarks only)")
    faults.add_argument("--reject-fraction", type=float, default=0.0, help="answer this share with 429")
    faults.add_argument("--retry-after", type=float, default=0.0, help="Retry-After seconds of a 429")
    faults.add_argument("--search-delay-ms", type=float, default=0.0, help="sleep this long in each search")
    faults.add_argument("--fault-seed", type=int, default=0)
    return p


@console_script
def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_intermixed_args(argv)  # overrides and options in any order
    # The server's stack (uvicorn, the HTTP face, the service and its pipeline: ~1 s) once the arguments
    # parse, so `memeval-serve --help` and a bad option answer at once.
    import uvicorn

    from experiments.serve.http_face import Faults, Guard, make_app
    from experiments.serve.service import MemoryService, ServiceError, load_override_keys
    from retrieval.pipeline import PipelineConfigError

    # On MCP's stdio, stdout is the protocol's wire: whatever building the service prints goes to stderr.
    quiet = contextlib.redirect_stdout(sys.stderr) if args.mcp == "stdio" else contextlib.nullcontext()
    token = os.environ.get(args.token_env) if args.token_env else None
    if args.token_env and token is None:
        print(f"error: --token-env {args.token_env}: that environment variable is not set", file=sys.stderr)
        sys.exit(2)
    if args.token_env and not token.strip():  # a token of spaces anyone can send
        print(
            f"error: --token-env {args.token_env}: the token is empty (blank once stripped)", file=sys.stderr
        )
        sys.exit(2)
    guard = Guard.serving(args.host, args.allow_origin, args.allow_host, token)
    try:
        keys = load_override_keys(args.override_keys) if args.override_keys else None
        with quiet:
            service = MemoryService.from_overrides(
                args.overrides, override_keys=keys, state_dir=args.state_dir
            )
    except BAD_INPUT:  # an unknown variant (an OSError too), a bad override: one line, exit 2
        raise
    except (ServiceError, PipelineConfigError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    if args.mcp:
        from experiments.serve.mcp_app import serve  # the MCP SDK (~1 s): only for --mcp

        serve(service, args.mcp, host=args.host, port=args.port, guard=guard)
        return
    faults = Faults(args.reject_fraction, args.retry_after, args.search_delay_ms, args.fault_seed)
    described = service.describe()
    print(
        f"memeval-serve: variant {described['variant']} ({' -> '.join(described['stages'])}) "
        f"on http://{args.host}:{args.port}",
        flush=True,
    )
    for folder in service.embedding_caches():  # one cache with memeval-run: the same folder (cache_dir)
        print(f"memeval-serve: embeddings cached in {folder}", flush=True)
    uvicorn.run(make_app(service, faults, guard), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()

"""`memeval-serve`: serve a memeval variant as a memory service on 127.0.0.1 (docs/live_systems.md).

    memeval-serve variant=exp05 --port 8000
    memeval-serve variant=hybrid --port 8000 --state-dir outputs/serve-state     # survives a restart
    memeval-serve --mcp stdio variant=dense       # the MCP face instead (experiments/serve/mcp_app.py)

Positional arguments are `memeval-run` config overrides (variant=..., stage.x.y=..., cache_dir=...): the
served variant is the one `memeval-run <overrides>` would score, so a served run gives the in-process
run's ranking. `--reject-fraction`, `--retry-after`, `--search-delay-ms` inject faults, for tests and
benchmarks only. Exit 2 on a bad config (nothing served).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence

from experiments.exit_codes import BAD_INPUT, ArgumentParser, console_script


def parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="memeval-serve",
        description="Serve a memeval variant as a memory service (AtomicMemory-shaped HTTP API).",
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
    faults = p.add_argument_group("fault injection (tests and benchmarks only)")
    faults.add_argument("--reject-fraction", type=float, default=0.0, help="answer this share with 429")
    faults.add_argument("--retry-after", type=float, default=0.0, help="Retry-After seconds of a 429")
    faults.add_argument("--search-delay-ms", type=float, default=0.0, help="sleep this long in each search")
    faults.add_argument("--fault-seed", type=int, default=0)
    return p


@console_script
def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_intermixed_args(argv)  # overrides and options in any order
    import uvicorn

    from experiments.serve.http_face import Faults, make_app
    from experiments.serve.service import MemoryService, ServiceError, load_override_keys
    from retrieval.pipeline import PipelineConfigError

    # On MCP's stdio, stdout is the protocol's wire: whatever building the service prints goes to stderr.
    quiet = contextlib.redirect_stdout(sys.stderr) if args.mcp == "stdio" else contextlib.nullcontext()
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
        from experiments.serve.mcp_app import serve

        serve(service, args.mcp, host=args.host, port=args.port)
        return
    faults = Faults(args.reject_fraction, args.retry_after, args.search_delay_ms, args.fault_seed)
    described = service.describe()
    print(
        f"memeval-serve: variant {described['variant']} ({' -> '.join(described['stages'])}) "
        f"on http://{args.host}:{args.port}",
        flush=True,
    )
    uvicorn.run(make_app(service, faults), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()

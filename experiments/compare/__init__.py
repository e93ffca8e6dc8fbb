"""Comparison reports: finished runs (MLflow or run directories) -> reports/<name>/report.md + index.html.

    python -m experiments.compare --name exp05_sweep --experiment exp05-sweep
    python -m experiments.compare --name local --run-dir multirun/2026-11-23_04-00-00

`assemble.build_report` is the one call; `analysis` computes the tables (paired tests, Holm),
`plots` draws the figures (matplotlib Agg), `drilldown` explains single queries (top k with score
columns, from each run's ranking.csv), `render` writes Markdown and HTML (both reference the PNG
figures beside them; reports/ commits the Markdown and the figures, the HTML is generated on demand).
"""

__all__ = ["build_report"]


def __getattr__(name: str):
    # Imported on first use: building pulls in matplotlib, which `memeval-report --help` should not wait for.
    if name == "build_report":
        from experiments.compare.assemble import build_report

        return build_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

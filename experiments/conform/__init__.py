"""memeval-conform: behavioural checks of a memory service through the adapters a live run uses.

One module per check group (isolation, lifecycle, content, ranking, supersession, failure); each check
is a `Check` subclass found by a scan (check.py) and named by its class. probe.py is how a check talks to
the service (every exchange through a cassette), runner.py runs them and writes the run folder, cli.py is
the console script. docs/conformance.md states every check and why it matters.
"""

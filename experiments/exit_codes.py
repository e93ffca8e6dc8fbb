"""The one exit-code rule of every memeval console script, stated once (each script's --help prints RULE):

    0  success
    1  a regression, or a failure of what was run (the gate's verdict; results that could not be kept)
    2  bad input, or cannot judge: a mistyped variant, key or override, a malformed suite, a missing
       baseline or model; nothing was measured

A CI pipeline reads 1 as "this change made things worse" and 2 as "fix the command": a typo in an
override must never read as a regression. Each script exits 2 for its own errors (ConfigError, GateError,
SuiteError ...); `console_script`, around each script's `main`, adds the mistakes Hydra and OmegaConf
raise while composing a config, printed as one line naming the key or override (the traceback only with
HYDRA_FULL_ERROR=1, Hydra's own switch for it).

Hydra's @hydra.main reports any exception itself and exits 1 (hydra/_internal/utils.py run_and_report),
unless HYDRA_FULL_ERROR=1 is set, when it re-raises it. So `console_script` sets that variable for the
call and judges the exception itself: bad input exits 2; anything else exits 1, its traceback printed
as Hydra prints it (below Hydra's own frames; whole with HYDRA_FULL_ERROR=1). A process the script
starts meanwhile (a launcher's worker) inherits the variable; only Hydra's run_and_report reads it.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
import traceback
import typing
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from hydra.errors import CompactHydraException, OverrideParseException
from omegaconf.errors import OmegaConfBaseException

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
# One line of each --help, at most 78 characters (argparse wraps an epilog at 80 columns).
RULE = "Exit codes: 0 success; 1 regression or failed run; 2 bad input or cannot judge"

# What Hydra and OmegaConf raise for a config a user got wrong. Hydra's CompactHydraException is its own
# class of "the user's mistake, shown without a traceback": an unknown config choice (MissingConfigException),
# an unknown key or a value a typed field refuses (ConfigCompositionException, caused by an OmegaConf error),
# override syntax (OverrideParseException), a --config-dir that is not there, a config that does not build
# (InstantiationException). OmegaConf's own errors come from a config read later (a missing `???` value).
BAD_INPUT = (CompactHydraException, OmegaConfBaseException)
FULL_ERROR = "HYDRA_FULL_ERROR"


def bad_input_message(err: BaseException) -> str:
    """One line naming the mistake: Hydra's first line, the override it could not parse, the options of a
    config group that has no such choice, and the first line of the error underneath."""
    parts = [_first_line(err)]
    if isinstance(err, OverrideParseException):
        parts.insert(0, f"override {err.override!r}")
    options = getattr(err, "options", None)  # MissingConfigException: the group's choices
    if options:
        parts.append(f"options: {', '.join(options)}")
    if err.__cause__ is not None:  # the OmegaConf error under a composition error, a builder's own error
        parts.append(_first_line(err.__cause__))
    return ": ".join(p.rstrip(".") for p in parts if p)


def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser for the scripts that are not Hydra apps: the rule as its epilog, and a mistake
    (a missing argument, an unknown option, a value of the wrong type) as one line, exit 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("epilog", RULE)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> typing.NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (--help for usage)\n")


@contextlib.contextmanager
def _hydra_raises() -> Iterator[None]:
    """HYDRA_FULL_ERROR=1 for the call, so @hydra.main re-raises instead of exiting 1; restored after."""
    before = os.environ.get(FULL_ERROR)
    os.environ[FULL_ERROR] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(FULL_ERROR, None)
        else:
            os.environ[FULL_ERROR] = before


def console_script(main: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a console script's `main`: a config mistake from Hydra or OmegaConf exits 2 with one line."""

    @functools.wraps(main)
    def run(*args: Any, **kwargs: Any) -> Any:
        full = os.environ.get(FULL_ERROR) == "1"
        one_line_warnings()
        try:
            with _hydra_raises():
                return main(*args, **kwargs)
        except BAD_INPUT as err:
            if full:
                traceback.print_exc()
            print(f"error: {bad_input_message(err)}", file=sys.stderr)
            sys.exit(EXIT_BAD_INPUT)
        except Exception as err:  # a crash, a failed sweep job: exit 1, printed as Hydra prints it
            if getattr(err, "exit_code", None) == EXIT_BAD_INPUT:  # a sweep job's bad input (JobBadInput)
                print(f"error: {err}", file=sys.stderr)
                sys.exit(EXIT_BAD_INPUT)
            if full:
                raise
            _print_below_hydra(err)
            sys.exit(EXIT_FAILED)

    return run


def one_line_warnings() -> None:
    """Warnings on the console as one line each: what the user should know, not where it was raised. A
    console script sets it; so does each job of a sweep, which may run in a worker process (joblib, SLURM)
    where the script's setting never reached."""
    warnings.formatwarning = _one_line_warning


def _one_line_warning(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> str:
    """A warning on the console as one line (`warning: ...`), as an error is; a library's own warnings
    (not memeval's UserWarnings) keep their category's name."""
    kind = "" if category is UserWarning else f" ({category.__name__})"
    return f"warning{kind}: {message}\n"


def _print_below_hydra(err: BaseException) -> None:
    """The traceback without Hydra's frames above the task function, as run_and_report prints it unless
    HYDRA_FULL_ERROR=1 (a script that is not a Hydra app has none: its whole traceback)."""
    below = tb = err.__traceback__
    while tb is not None:
        if tb.tb_frame.f_globals.get("__name__", "").startswith(("hydra.", "hydra_plugins.")):
            below = tb.tb_next
        tb = tb.tb_next
    traceback.print_exception(type(err), err, below or err.__traceback__)
    if below is not err.__traceback__:
        print(f"\nSet the environment variable {FULL_ERROR}=1 for a complete stack trace.", file=sys.stderr)

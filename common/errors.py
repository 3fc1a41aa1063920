"""User errors: a mistake in the input, reported as one line that names the bad value and the fix."""

import sys


class UserError(Exception):
    """A mistake in the user's input, or a runs folder that cannot be written (read-only, full): reported as one
    line, exit code 2, no traceback."""


def check(condition: bool, message: str) -> None:
    """Raise a UserError with `message` (which names the bad value and the fix) unless `condition`."""
    if not condition:
        raise UserError(message)


def run_tool(main, *args) -> None:
    """A tool's entry point (scripts/): `main(*args)`, its UserError one line and exit code 2, as in a training
    script (common/cli.py's `cli`) and as tyro exits on a flag it cannot parse; Ctrl-C one line and 130."""
    try:
        main(*args)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:  # the runs a tool started stop with it: each keeps its checkpoint
        print("interrupted: what was written so far is kept; the same command goes on from there", file=sys.stderr)
        raise SystemExit(130) from None

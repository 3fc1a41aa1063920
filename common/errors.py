"""User errors: a mistake in the input, reported as one line that names the bad value and the fix."""


class UserError(Exception):
    """A mistake in the user's input, or a runs folder that cannot be written (read-only, full): reported as one
    line, exit code 2, no traceback."""


def check(condition: bool, message: str) -> None:
    """Raise a UserError with `message` (which names the bad value and the fix) unless `condition`."""
    if not condition:
        raise UserError(message)

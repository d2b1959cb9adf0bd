"""The one exception type that the CLI turns into exit code 2 (bad input)."""


class InputError(ValueError):
    """Invalid user input: a bad flag, a malformed file, an impossible parameter."""


def require(condition: bool, message: str) -> None:
    """Raise :class:`InputError` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise InputError(message)

"""Errors raised while building or asking a victim. The harness re-exports them (harness/core/errors.py)
so that every layer above can catch them by one name."""


class BadInput(Exception):
    """Bad input from the user (scenario, option, model file, data file, endpoint): exit code 2."""


class InterfaceError(Exception):
    """Something was asked of the deployment that its interface does not offer."""

"""Errors shared by every command."""


class UserError(Exception):
    """A problem the user can fix: printed as one message naming the problem and the fix,
    with no traceback, before anything has been changed."""

"""Errors shared by every command."""


class UserError(Exception):
    """A problem the user can fix: printed as one message naming the problem and the fix,
    with no traceback, before anything has been changed."""


class JobStopped(Exception):
    """A job stopped part-way for a cause outside the input (the disk is full, no server
    answers): printed as one line naming the cause and the fix, exit status 1. Everything
    journalled so far stays, so running the same command again resumes."""

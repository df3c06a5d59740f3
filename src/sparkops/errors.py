"""Errors shared by every command."""


class UserError(Exception):
    """A problem the user can fix: printed as one message naming the problem and the fix,
    with no traceback, before anything has been changed."""


class Advice(UserWarning):
    """A setup that works but that a vLLM user would question (pipeline parallel for a model
    that fits one Spark): one line on stderr, "sparkops: warning: ...", and the command goes
    on."""


class JobStopped(Exception):
    """A job stopped part-way for a cause outside the input (the disk is full, no server
    answers): printed as one line naming the cause and the fix, exit status 1. Everything
    journalled so far stays, so running the same command again resumes."""


class Interrupted(JobStopped):
    """A job stopped by SIGINT or SIGTERM: one line, exit status 128 + the signal (130, 143).
    In-flight calls were cancelled and the journal flushed, so the same command resumes."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return 128 + self.signum

"""The one exception type the application layer raises for bad input."""


class WorkbenchError(Exception):
    """A user-facing problem, explained in one line (the CLI prints ``error: <message>``).

    Raise it for anything the user can fix: unknown corpus, malformed file, invalid pair.
    Programming errors stay ordinary exceptions.
    """


class PermissionDenied(WorkbenchError):
    """The acting user's role does not allow this (``workbench.team.access.require``); the
    HTTP API answers it with 403."""

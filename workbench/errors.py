"""The one exception type the application layer raises for bad input."""

from __future__ import annotations

from typing import Any

from workbench.messages import MessageId


class WorkbenchError(Exception):
    """A user-facing problem, explained in one line (the CLI prints ``error: <message>``).

    Raise it for anything the user can fix: unknown corpus, malformed file, invalid pair.
    Programming errors stay ordinary exceptions.

    A message marked ``N_("unknown corpus “{name}”")`` with its parameters
    (``WorkbenchError(N_(...), name=name)``) is a message id: ``str(exc)`` is the English
    line (the CLI, the API, the logs), and a page shows ``msgid`` translated with ``params``
    (``ui.feedback.error_boundary``). Any other message is shown as it is.
    """

    def __init__(self, message: str = "", **params: Any) -> None:
        super().__init__(message.format(**params) if params else message)
        self.msgid: MessageId | None = message if isinstance(message, MessageId) else None
        self.params: dict[str, Any] = params


class PermissionDenied(WorkbenchError):
    """The acting user's role does not allow this (``workbench.team.access.require``); the
    HTTP API answers it with 403."""

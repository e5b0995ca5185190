"""Message ids: English text that the pages show translated (``ui.i18n``) while the command
line, the HTTP API and the logs show it as it is.

``N_("...")`` marks a literal for the catalog (``pybabel extract -k N_``, see ``babel.cfg``
and ``make i18n``) without translating it: the layers below the UI know nothing of the
user's language, they only say which of their messages have a translation.
"""

from __future__ import annotations


class MessageId(str):
    """A string that is a catalog's message id (named placeholders ``{name}``, not yet
    filled in)."""

    __slots__ = ()


class Message(str):
    """An English sentence (a ``str``: the CLI and the logs read it as it is) that keeps its
    message id and parameters, so that a page can show it translated (``ui.i18n.localized``).
    """

    msgid: MessageId
    params: dict[str, object]

    def __new__(cls, msgid: MessageId, **params: object) -> Message:
        text = super().__new__(cls, msgid.format(**params) if params else msgid)
        text.msgid, text.params = msgid, params
        return text


def N_(message: str) -> MessageId:  # gettext's conventional name
    """Mark ``message`` as a message id for the catalog; it is returned untranslated."""
    return MessageId(message)

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


def N_(message: str) -> MessageId:  # gettext's conventional name
    """Mark ``message`` as a message id for the catalog; it is returned untranslated."""
    return MessageId(message)

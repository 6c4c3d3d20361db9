"""The UI's log lines (logger ``everystep.ui``): every value a user typed or named — a
username, a reason, an event name, a filter, a store's message quoting them — goes into
the record with its control characters escaped (``safe_text.escape_controls``) and cut
to ``VALUE_MAX_LENGTH``. everystep's own formatters escape what they print, but a
project's formatter prints the record as it is: a newline in a username would start a
forged line there, and an escape code would recolour or move a terminal's cursor."""

from __future__ import annotations

import logging
from typing import Any

from everystep import safe_text

logger = logging.getLogger("everystep.ui")

VALUE_MAX_LENGTH = 500


def safe(value: Any) -> Any:
    """``value`` as it may go into a record: numbers as they are, a list item by item,
    anything else as text with its controls escaped, cut."""
    if isinstance(value, bool | int | float) or value is None:
        return value
    if isinstance(value, list | tuple):
        return [safe(item) for item in value]
    text = safe_text.escape_controls(str(value))
    if len(text) > VALUE_MAX_LENGTH:
        text = f"{text[:VALUE_MAX_LENGTH]}… [{len(text):,} characters]"
    return text


def info(message: str, *args: Any, extra: dict[str, Any]) -> None:
    """``logger.info(message, *args, extra=extra)`` with every arg and extra made safe."""
    logger.info(
        message,
        *(safe(arg) for arg in args),
        extra={key: safe(value) for key, value in extra.items()},
    )

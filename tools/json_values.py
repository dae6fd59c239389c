"""Values as JSON carries them: what every answer, record and page of sqlchorus writes out.

Database values and run state hold things JSON has no type for: blobs, tuples, objects. They
are made plain in one way everywhere, so that an answer reads the same from the command line,
a server, a tool or the viewer: a blob becomes ``<blob N bytes>`` (its bytes mean nothing as
text, and may be large), tuples become lists, keys become text, and any other object its text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

BLOB_TYPES = (bytes, bytearray, memoryview)
"""What a blob can come as, from SQLite or from state."""


def blob_text(value: bytes | bytearray | memoryview) -> str:
    """How a blob is shown: its size, not its bytes."""
    return f"<blob {len(bytes(value))} bytes>"


def json_value(value: Any, other: Callable[[Any], Any] = str) -> Any:
    """``value`` with everything inside it as JSON carries it.

    Text, numbers, booleans and None stay as they are; a blob becomes ``<blob N bytes>``; lists
    and tuples become lists and mappings dicts with text keys, their items made plain in turn;
    any other object becomes ``other(value)`` (its text by default).
    """
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, BLOB_TYPES):
        return blob_text(value)
    if isinstance(value, (list, tuple)):
        return [json_value(v, other) for v in value]
    if isinstance(value, dict):
        return {str(k): json_value(v, other) for k, v in value.items()}
    return other(value)

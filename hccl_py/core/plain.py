"""Plain data (JSON) that another process wrote: read without trusting its shape."""

from __future__ import annotations

import json
from typing import Any

#: What :func:`json_or` returns for bytes that are no JSON, where None is a value.
NOT_JSON = object()


def json_or(raw: bytes | str, default: Any = None) -> Any:
    """``json.loads(raw)``, or ``default`` where ``raw`` is no JSON, or JSON nested deeper than
    Python recurses (anyone who reaches a store, or a peer, can send either)."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return default

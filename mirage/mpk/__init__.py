"""mirage.mpk: the persistent-kernel test-mode runner."""
from __future__ import annotations

import logging
import os

_log = logging.getLogger("mirage.mpk")
if not _log.handlers:
    # One stderr line per build step (cache hit/miss, files written); MPK_LOG_LEVEL=WARNING quiets it.
    _handler = logging.StreamHandler()
    _handler.setFormatter(logging.Formatter("[mirage.mpk] %(message)s"))
    _log.addHandler(_handler)
    _log.setLevel(os.environ.get("MPK_LOG_LEVEL", "INFO").upper())
    _log.propagate = False

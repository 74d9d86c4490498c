"""mirage.mpk: the persistent-kernel test-mode runner."""
from __future__ import annotations

import logging
import os


class _RankFormatter(logging.Formatter):
    """"[rank r] [mirage.mpk] ..." in a multi-rank job (evidence lines carry the same prefix), so the
    ranks' lines stay whole and attributable; each record is written with one write()."""

    def format(self, record: logging.LogRecord) -> str:
        from .dist import rank_prefix  # lazily: dist imports torch
        return rank_prefix() + super().format(record)


_log = logging.getLogger("mirage.mpk")
if not _log.handlers:
    # One stderr line per build step (cache hit/miss, files written); MPK_LOG_LEVEL=WARNING quiets it.
    _handler = logging.StreamHandler()
    _handler.setFormatter(_RankFormatter("[mirage.mpk] %(message)s"))
    _log.addHandler(_handler)
    _log.setLevel(os.environ.get("MPK_LOG_LEVEL", "INFO").upper())
    _log.propagate = False

"""Suite-wide setup: a fresh compile cache, so no test passes on a stale build."""
import os
import tempfile

_cache = tempfile.mkdtemp(prefix="mpk-test-cache-")
os.environ["MPK_CACHE_DIR"] = _cache

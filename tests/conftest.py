"""Suite-wide setup: a fresh compile cache, so no test passes on a stale build.

scripts/gpu_check.sh runs test files on the GPU with MPK_TEST_DEVICE=cuda (tensors the tests create
go to the GPU: torch's default device) and MPK_TEST_CACHE_DIR (its cache of modules built ahead)."""
import os
import tempfile

_cache = os.environ.get("MPK_TEST_CACHE_DIR") or tempfile.mkdtemp(prefix="mpk-test-cache-")
os.environ["MPK_CACHE_DIR"] = _cache
if os.environ.get("MPK_TEST_DEVICE"):
    import torch

    torch.set_default_device(os.environ["MPK_TEST_DEVICE"])

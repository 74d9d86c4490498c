"""The compile cache never loads a damaged entry and names every environment problem; odd jitter seeds
are refused.

Each entry carries its module's sha256 and size (module.sha256, written before the entry is
renamed into place); every hit checks them, and a mismatch is a warning, the entry is discarded
and rebuilt. A cache directory that is a file, cannot be created, or fills up while publishing is
an MPKCacheError naming the path and MPK_CACHE_DIR, and leaves nothing a later run would trust.
Run: pytest tests/unit/test_cache_integrity.py -s
"""
import errno
import os
import subprocess
import sys

import pytest
import torch

from mirage.mpk import build, testing
from mirage.mpk.errors import MPKCacheError
from mirage.mpk.persistent_kernel import PersistentKernel

BLOCK = (128, 1, 1)


def run_rmsnorm(tmp_path) -> tuple[PersistentKernel, list[str]]:
    """Compile and run a small rmsnorm, check it; return the kernel and the log lines."""
    gen = testing.generator(offset=3)
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=1))
    x, w = testing.randn((6, 64), torch.float32, gen), testing.randn((64,), torch.float32, gen)
    out = torch.zeros(6, 64)
    x_dt, w_dt, out_dt = (pk.attach_input(t, name=n) for t, n in ((x, "x"), (w, "w"), (out, "out")))
    pk.rmsnorm_layer(x_dt, w_dt, out_dt, (3, 1, 1), BLOCK)
    with testing.capture_log() as log:
        pk.compile()
    pk()
    ref = x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
    testing.check_output("cache.rmsnorm", out, ref, testing.tol_rmsnorm(torch.float32, 64),
                         pk.layers[0].checks, (x,), pk=pk)
    pk.finalize()
    return pk, log


FIRST_RUN = """
import sys
sys.path.insert(0, {here!r})
import test_cache_integrity as t
pk, _ = t.run_rmsnorm(None)
print("MODULE", pk.build.path)
"""


@pytest.mark.parametrize("damage", ["truncated", "random_bytes", "no_checksum"])
def test_a_damaged_entry_is_discarded_and_rebuilt(tmp_path, monkeypatch, damage):
    monkeypatch.setenv("MPK_CACHE_DIR", str(tmp_path / "cache"))
    # The first run is another process, as in life: a module this process had loaded stays mapped, and
    # damaging a mapped file crashes its loader whatever the cache does.
    proc = subprocess.run([sys.executable, "-c", FIRST_RUN.format(here=os.path.dirname(__file__))],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    so = next(line.split()[1] for line in proc.stdout.splitlines() if line.startswith("MODULE "))
    entry = os.path.dirname(so)
    size = os.path.getsize(so)
    if damage == "truncated":                  # what killed the process with a bus error before
        with open(so, "r+b") as f:
            f.truncate(1000)
    elif damage == "random_bytes":             # gave a raw "invalid ELF header" before
        with open(so, "wb") as f:
            f.write(os.urandom(size))
    else:                                       # an entry published without its record
        os.remove(os.path.join(entry, "module.sha256"))
    second, log = run_rmsnorm(tmp_path)
    print(f"CACHE {damage}: {[line for line in log if 'is damaged' in line or 'compil' in line]}")
    assert any(f"cache entry {entry} is damaged" in line and "discarding it and rebuilding" in line
               for line in log)
    assert any("cache miss" in line for line in log) and not second.build.hit
    assert os.path.getsize(second.build.path) == size
    with open(os.path.join(entry, "module.sha256")) as f:
        assert f.read().split() == [build.sha256_file(second.build.path), str(size)]
    third, log = run_rmsnorm(tmp_path)              # and the rebuilt entry is trusted again
    assert third.build.hit and not any("is damaged" in line for line in log)


def test_cache_dir_that_is_a_file_or_cannot_be_created(tmp_path, monkeypatch):
    afile = tmp_path / "not_a_dir"
    afile.write_text("x")
    monkeypatch.setenv("MPK_CACHE_DIR", str(afile))
    with pytest.raises(MPKCacheError, match=rf"the compile cache {afile} \(MPK_CACHE_DIR\) is a file, not a "
                                            rf"directory"):
        build.compile_module("int x;", "cpu", True)
    nowhere = "/proc/mpk-cache-test"                 # no one may create a directory there, root included
    monkeypatch.setenv("MPK_CACHE_DIR", nowhere)
    with pytest.raises(MPKCacheError, match=rf"cannot create the compile cache {nowhere} "
                                            rf"\(MPK_CACHE_DIR\): "):
        build.compile_module("int x;", "cpu", True)


def test_a_full_disk_while_publishing_leaves_nothing_behind(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("MPK_CACHE_DIR", str(cache))

    def no_space(*args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(build.os, "replace", no_space)
    with pytest.raises(MPKCacheError) as e:
        run_rmsnorm(tmp_path)
    print(f"CACHE full disk: {e.value}")
    assert "No space left on device" in str(e.value) and f"(cache {cache}, MPK_CACHE_DIR)" in str(e.value)
    assert "nothing was published" in str(e.value)
    left = sorted(p.name for p in cache.iterdir() if not p.name.endswith(".lock"))
    assert left == [], f"a half-written entry or temporary directory was left: {left}"
    monkeypatch.undo()
    monkeypatch.setenv("MPK_CACHE_DIR", str(cache))
    pk, _ = run_rmsnorm(tmp_path)                    # the next run compiles and publishes normally
    assert not pk.build.hit


@pytest.mark.parametrize("value", ["-1", "abc", "1.5", str(2**64), " "])
def test_odd_schedule_jitter_seeds_are_refused(monkeypatch, value):
    monkeypatch.setenv("MPK_SCHEDULE_JITTER", value)
    with pytest.raises(ValueError, match=r"MPK_SCHEDULE_JITTER=.*: a schedule-jitter seed must be an "
                                         r"integer in \[0, 2\^64\)"):
        PersistentKernel(test_mode=True)


def test_valid_schedule_jitter_seeds(monkeypatch):
    monkeypatch.setenv("MPK_SCHEDULE_JITTER", str(2**64 - 1))
    assert PersistentKernel(test_mode=True).schedule_jitter == 2**64 - 1
    monkeypatch.setenv("MPK_SCHEDULE_JITTER", "0")
    assert PersistentKernel(test_mode=True).schedule_jitter == 0
    monkeypatch.delenv("MPK_SCHEDULE_JITTER")
    assert PersistentKernel(test_mode=True, schedule_jitter=5).schedule_jitter == 5
    with pytest.raises(ValueError, match=r"schedule_jitter=-3: a schedule-jitter seed"):
        PersistentKernel(test_mode=True, schedule_jitter=-3)

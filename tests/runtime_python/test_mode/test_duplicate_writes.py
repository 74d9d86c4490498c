"""Two threads of a task storing to one global element between barriers: a named race, whatever the values.

A chunk loop that steps 128 where the block has 256 threads makes threads t and t + 128 store the same
elements with the same values: every footprint and value check passes. Under MPK_SANITIZE=thread the
emulated threads are ThreadSanitizer fibers, so the stores are a data race, which run_tasks turns into
an MPKFootprintError naming the task, the threads, the element and the kernel lines
(mirage/mpk/testing/races.py; docs/kernel_tests.md).

Negative control: identity.cuh's chunk loop rewritten to step 128 (a scratch copy of csrc/,
MPK_CSRC_DIR), one task of a [4, 512] fp32 tensor on 256 threads (cc 90): named. Positive control: the
same build on 128 threads (cc 80), where a step of 128 is the block's size: no race, the run passes.
One child under ThreadSanitizer (mirage.mpk.sanitize.run_under_sanitizer); its sanitized build
dominates the time.

Run: python -m pytest -q -s tests/runtime_python/test_mode/test_duplicate_writes.py
"""
import os
import re
import shutil
import sys

import pytest
import torch

from mirage.mpk import build, testing
from mirage.mpk.errors import MPKFootprintError
from mirage.mpk.sanitize import run_under_sanitizer

pytestmark = pytest.mark.skipif(os.environ.get("MPK_TEST_DEVICE", "cpu") != "cpu",
                                reason="ThreadSanitizer runs the CPU emulation")

# a sanitized runtime object and module, about 20 s each on a busy core; twice that still fits
TIMEOUT_S = 300
LOOP = "    for_each_chunk(yt.rows, yt.cols / N, [&](int64_t r, int64_t c) {\n"
STEP_128 = ("    const int64_t chunks = yt.cols / N;   // negative control: steps 128, whatever blockDim.x\n"
            "    for (int64_t i = threadIdx.x; i < yt.rows * chunks; i += 128) {\n"
            "        const int64_t r = i / chunks, c = i % chunks;\n")
LOOP_END = "j * xt.col_stride));\n    });\n"


def step_128_csrc(folder: str) -> str:
    """A copy of csrc/ whose identity walks its chunks 128 apart (the lambda's body becomes the loop's)."""
    dst = os.path.join(folder, "csrc")
    shutil.copytree(build.csrc_dir(), dst)
    path = os.path.join(dst, "tasks", "identity.cuh")
    src = open(path).read()
    assert src.count(LOOP) == 1 and src.count(LOOP_END) == 1, "identity.cuh changed: update this control"
    open(path, "w").write(src.replace(LOOP, STEP_128).replace(LOOP_END, "j * xt.col_stride));\n    }\n"))
    return dst


def test_a_duplicate_write_is_a_named_race(tmp_path):
    result = run_under_sanitizer("thread", [__file__, "--child"], TIMEOUT_S,
                                 env={"MPK_CSRC_DIR": step_128_csrc(str(tmp_path)),
                                      "MPK_OUTPUT_DIR": str(tmp_path)})
    print(result.summary)
    print(result.stdout[-2000:])
    assert result.returncode == 0 and not result.timed_out, \
        f"{result.summary}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert re.search(r"^POSITIVE identity\[step 128, 128 threads\] PASS$", result.stdout, re.M), result.stdout
    caught = re.search(r"^CAUGHT (.*)$", result.stdout, re.M)
    assert caught, result.stdout
    msg = caught[1]
    lines = r"common\.cuh:\d+ < identity\.cuh:\d+"
    assert re.fullmatch(
        r"task \(0, 0, 0\) of layer 'identity_0' \(identity\) has two threads of its block write one element "
        r"between barriers \(a race whatever the values are; ThreadSanitizer\): tensor 'out' \(float32, "
        rf"shape \(4, 512\), strides \(512, 1\)\): \(\d, \d+\); thread (\d+) write at {lines}, and before "
        rf"it thread (\d+) write at {lines}", msg), msg
    first, second = map(int, re.search(r"thread (\d+) write.*thread (\d+) write", msg).groups())
    assert abs(first - second) == 128, f"threads {first} and {second}: not 128 apart"


def child() -> int:
    """Under ThreadSanitizer: the step-128 identity on 128 threads (passes), then on 256 (named)."""
    x = testing.randn((4, 512), torch.float32, testing.generator(offset=5))

    def run(target_cc: int):
        return testing.run_tasks(
            lambda pk, t: pk.identity_layer(input=t["x"], output=t["out"], grid_dim=(1, 1, 1),
                                            block_dim=testing.worker_block_dim(target_cc)),
            {"x": x, "out": torch.zeros(4, 512)}, target_cc=target_cc)
    assert torch.equal(run(80).outputs["out"], x)
    print("POSITIVE identity[step 128, 128 threads] PASS", flush=True)
    try:
        run(90)
    except MPKFootprintError as e:
        print(f"CAUGHT {str(e).splitlines()[0]}", flush=True)
        return 0
    print("NOT CAUGHT: the duplicate writes of 256 threads stepping 128 passed", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(child() if sys.argv[1:] == ["--child"] else pytest.main([__file__, "-q", "-s"]))

"""Kernel-level negative controls, after compute-sanitizer's samples (racecheck, synccheck,
initcheck, memcheck): one small task kernel with a switch for each bug, each bug shown CAUGHT
with its message, by the kernel-level run (testing.run_tasks + run.check) and, where it can be,
by test mode (pk() of a one-layer graph, several workers, schedule jitter, testing.check_output).

The kernel is kernel_samples/negctl_twice.cuh: y = 2 x per row through a block-wide and a
warp-wide exchange in shared memory (kernel_samples.py adds it to a copy of csrc/ and registers
its layer module; nothing under mirage/ or csrc/ changes). bug="ok" is the positive control.

  #  bug                  like          kernel level                         test mode
  1  smem_race            racecheck     MPKFootprintError (2 thread orders)  mismatch
  2  warp_race            racecheck     MPKFootprintError (2 thread orders)  mismatch
  3  divergent_barrier    synccheck     MPKRuntimeError, file:line           MPKRuntimeError, file:line
  4  syncwarp_mask,       synccheck     MPKRuntimeError, file:line           MPKRuntimeError, file:line
     exited_lanes
  5  uninit               initcheck     MPKFootprintError (2 shared-memory   mismatch: NaN
                                        fills)
     static_once          initcheck     MPKFootprintError (2 fills: static   mismatch: NaN (poisoned at
                                        __shared__ too)                      every task start)
  6  out_of_tile          memcheck      MPKFootprintError (poison)           equal values: nothing;
                                                                             else only if the order is
                                                                             unlucky
  7  out_of_tensor        memcheck      MPKFootprintError (red zone)         MPKMemoryError (red zone),
                                                                             the process unharmed
  8  halo_read            memcheck      MPKFootprintError (2 poisons)        nothing (alpha = 0)

Every caught message is printed (pytest -s shows them). Grid: 3 tasks of 2 rows of a [6, 160]
fp32 tensor on 128 threads: two column chunks per row, the second ragged.

Run: python tests/runtime_python/test_mode/test_kernel_negative_controls.py   (or pytest -s this file)
"""
import os
import re
import sys

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.errors import MPKFootprintError, MPKMemoryError, MPKRuntimeError

# The messages asserted are the CPU emulation's (on a GPU a divergent barrier hangs, or worse).
pytestmark = pytest.mark.skipif(os.environ.get("MPK_TEST_DEVICE", "cpu") != "cpu",
                                reason="negative controls of the CPU emulation's checks")

HERE = os.path.dirname(os.path.abspath(__file__))
ks = testing.load_reference(__file__, name="kernel_samples")

ROWS, COLS, GRID = 6, 160, 3
JITTER = 3
LAYER = "negctl_twice_0"
Y = "tensor 'y' (float32, shape (6, 160), strides (160, 1))"


@pytest.fixture(scope="module")
def sample_csrc(tmp_path_factory):
    return ks.make_csrc(str(tmp_path_factory.mktemp("negctl")))


@pytest.fixture(autouse=True)
def sample(monkeypatch, sample_csrc):
    ks.install(monkeypatch, sample_csrc)


def x_random() -> torch.Tensor:
    return testing.randn((ROWS, COLS), torch.float32, testing.generator(offset=ROWS * COLS))


def x_equal_rows() -> torch.Tensor:
    """Every row the same: a task that writes its own row's value into its neighbour's row writes
    exactly what the neighbour writes there, so no comparison of values can see it."""
    return x_random()[:1].repeat(ROWS, 1)


def caught(case: str, path: str, e: BaseException) -> str:
    msg = str(e)
    print(f"\nCAUGHT [{case}] {path}: {type(e).__name__}: {msg}")
    return msg


def not_caught(case: str, path: str, why: str) -> None:
    print(f"\nNOT CAUGHT [{case}] {path}: {why}")


def kernel_raises(case: str, bug: str, exc, x=None, coords=None) -> str:
    with pytest.raises(exc) as e:
        ks.run_kernel(x_random() if x is None else x, bug, GRID, coords)
    msg = caught(case, "kernel level", e.value)
    if isinstance(e.value, MPKFootprintError):    # the finding, then where the failing case was kept
        msg, _, kept = msg.partition("\n")
        assert kept.startswith("Failure files (source, task graph, module, inputs"), kept
    return msg


def raises_in_test_mode(case: str, bug: str, exc, x=None) -> str:
    with pytest.raises(exc) as e:
        ks.run_test_mode(x_random() if x is None else x, bug, GRID, JITTER)
    return caught(case, "test mode", e.value)


def mismatch_of(msg: str) -> None:
    """A test-mode mismatch from check_output: names the layer's bad tiles by grid coordinate."""
    assert "is not close (float32, (6, 160))" in msg, msg
    assert f"Bad tiles of layer '{LAYER}' output 'y' (grid coordinate: bad/total)" in msg, msg


TASK = r"task \d+ = 'negctl_twice_0'\(\d, 0, 0\)"


def runtime_error_of(msg: str, kernel_level: bool) -> None:
    """The emulation's error as the runtime reports it: the task's id, layer and grid coordinate."""
    where = (rf"^{TASK} failed: " if kernel_level else
             rf"^launch failed \(status \d+\): {TASK} \(variant 0, iteration 1\) failed: ")
    assert re.search(where, msg), msg


# ---- the positive control: the same kernel and both paths, bug off

def test_positive_control_passes_both_paths():
    run = ks.run_kernel(x_random(), "ok", GRID)
    assert run.coords == [(0, 0, 0), (1, 0, 0), (2, 0, 0)]
    out = ks.run_test_mode(x_random(), "ok", GRID, JITTER)
    assert torch.equal(out, 2 * x_random())
    # the equal-rows input of case 6 is no degenerate case of the check itself
    ks.run_test_mode(x_equal_rows(), "ok", GRID, JITTER)


# ---- 1, 2: races (racecheck)

def test_1_shared_memory_race():
    """Thread t writes stage[t]; thread t + 32 reads it with no __syncthreads between. Whatever
    warp runs first reads a slot its predecessor has not written yet, in every chunk: what it reads
    is the fresh block's fill, so the second run's other fill changes the output (the race itself
    shows too, with a second thread order, once the fill is the same: test_1_..._same_fill)."""
    msg = kernel_raises("1 smem race", "smem_race", MPKFootprintError)
    assert msg == (f"task (0, 0, 0) of layer '{LAYER}' (negctl_twice) reads shared memory no thread wrote: "
                   f"its output changes with the byte a fresh block's shared memory holds (0xFF or 0x41): a "
                   f"read before a barrier, or of a slot no thread wrote this task"), msg
    mismatch_of(raises_in_test_mode("1 smem race", "smem_race", AssertionError))


def test_2_warp_race():
    """Lanes swap values through shared memory assuming lockstep (no __syncwarp): lanes run one after
    another, so the first of each pair reads its partner's slot before the partner writes it."""
    msg = kernel_raises("2 warp race", "warp_race", MPKFootprintError)
    assert f"task (0, 0, 0) of layer '{LAYER}' (negctl_twice) gives different results with another" in msg
    assert "a race inside the block" in msg and f"{Y}: (0, " in msg, msg
    mismatch_of(raises_in_test_mode("2 warp race", "warp_race", AssertionError))


# ---- 3, 4: barriers and warp masks (synccheck)

def test_3_divergent_barrier():
    expected = (f"divergent __syncthreads: {ks.line_of('divergent barrier')} reached by 64 of 128 threads, "
                f"{ks.line_of('stage A reuse barrier')} by 64")
    msg = kernel_raises("3 divergent barrier", "divergent_barrier", MPKRuntimeError)
    assert msg == f"task 1 = '{LAYER}'(0, 0, 0) failed: {expected}", msg
    msg = raises_in_test_mode("3 divergent barrier", "divergent_barrier", MPKRuntimeError)
    runtime_error_of(msg, kernel_level=False)
    assert msg.endswith(expected), msg


def test_4a_syncwarp_mask_without_the_calling_lane():
    """__syncwarp((1u << 31) - 1) called by all 32 lanes: lane 31 is not in its own mask."""
    expected = re.compile(rf"__syncwarp at {ks.line_of('bad mask')}: mask 0x7fffffff does not include the "
                          rf"calling threadIdx.x \d+ \(warp \d, lane 31\)$")
    for path, raises, kernel_level in (("kernel", kernel_raises, True),
                                       ("test mode", raises_in_test_mode, False)):
        msg = raises("4a __syncwarp mask", "syncwarp_mask", MPKRuntimeError)
        runtime_error_of(msg, kernel_level)
        assert expected.search(msg), f"{path}: {msg}"


def test_4b_syncwarp_naming_lanes_that_exited():
    """The last 16 threads return before a full-mask __syncwarp. Alone on a block (kernel level) the
    thread returns: the emulation names the lanes that exited, or the one that exited while others
    wait; in test mode the task's return is the executor's barrier, where the emulation names the
    16 lanes at __syncwarp that the barrier waits for."""
    syncwarp = ks.line_of("stage B write-read syncwarp")
    msg = kernel_raises("4b exited lanes", "exited_lanes", MPKRuntimeError)
    runtime_error_of(msg, kernel_level=True)
    assert re.search(rf"threadIdx.x \d+ \(warp 3, lane \d+\) exited while threadIdx.x \d+ "
                     rf"\(warp 3, lane \d+\) waits for it at __syncwarp {syncwarp} \(mask 0xffffffff\)$|"
                     rf"__syncwarp at {syncwarp} by .*: mask 0xffffffff names lanes 0xffff0000 of warp 3 "
                     rf"that have exited$", msg), msg
    msg = raises_in_test_mode("4b exited lanes", "exited_lanes", MPKRuntimeError)
    runtime_error_of(msg, kernel_level=False)
    assert f"16 wait at __syncwarp {syncwarp} (warp 3, mask 0xffffffff)" in msg, msg


def test_mode_names_the_failing_task():
    """Cases 3 and 4 over 20 schedules each: every test-mode error names its task, also when two
    workers' blocks fail at once (host_cpu.h block_failed: each names the task its slot shows)."""
    unnamed = []
    for bug in ("divergent_barrier", "syncwarp_mask", "exited_lanes"):
        for jitter in range(20):
            with pytest.raises(MPKRuntimeError) as e:
                ks.run_test_mode(x_random(), bug, GRID, jitter)
            if not re.search(TASK, str(e.value)):
                unnamed.append(f"{bug}, jitter {jitter}: {e.value}")
    assert not unnamed, f"{len(unnamed)} of 60 test-mode errors name no task:\n" + "\n".join(unnamed)


# ---- 5: uninitialised reads (initcheck)

def test_5a_uninitialised_shared_memory_read():
    """Stage A's read index loses its wrap: threads 32.. read slots [128, 224) of the stage, which no
    thread writes. Shared memory starts as 0xFF (NaN) in every block and before every task in test
    mode; the kernel-level run's second run starts it as 0x41 instead, so the output changes: caught
    by the footprint check even where the NaN would be masked (fmaxf, a select). Test mode sees the
    NaN in the comparison."""
    msg = kernel_raises("5a uninitialised smem", "uninit", MPKFootprintError)
    assert msg == (f"task (0, 0, 0) of layer '{LAYER}' (negctl_twice) reads shared memory no thread wrote: "
                   f"its output changes with the byte a fresh block's shared memory holds (0xFF or 0x41): a "
                   f"read before a barrier, or of a slot no thread wrote this task"), msg
    msg = raises_in_test_mode("5a uninitialised smem", "uninit", AssertionError)
    mismatch_of(msg)
    assert "Mismatched elements: 768 / 960" in msg and ": actual nan, expected " in msg, msg
    assert "NaN: 768 of the 768 mismatched elements are NaN with the shared-memory poison's payload" in msg, \
        msg


def test_5b_static_shared_written_only_by_an_earlier_task():
    """`two` is a static __shared__ set only by the task whose tile starts at row 0. Static shared memory
    is poisoned at every block start (a kernel-level task is its own block) and every test-mode task
    start (docs/simt.md), so tasks (1, 0, 0) and (2, 0, 0) read NaN, not task (0, 0, 0)'s 2.0."""
    msg = kernel_raises("5b static __shared__", "static_once", MPKFootprintError, coords=[(1, 0, 0)])
    assert msg.startswith(f"task (1, 0, 0) of layer '{LAYER}' (negctl_twice) reads shared memory no thread "
                          f"wrote: "), msg


def test_5b_static_shared_in_test_mode():
    """Test mode poisons static shared memory before every task on a worker block too, so the tasks
    that do not set `two` read NaN whatever the schedule (before the poison, a worker that had run
    task (0, 0, 0) first carried its 2.0 over and the case passed)."""
    msg = raises_in_test_mode("5b static __shared__", "static_once", AssertionError)
    mismatch_of(msg)
    assert ": actual nan, expected " in msg and "(0, 0, 0):" not in msg, msg
    assert "(1, 0, 0): 320/320" in msg and "(2, 0, 0): 320/320" in msg, msg


# ---- 6, 7, 8: memory outside the task's tiles (memcheck)

def test_6_out_of_tile_write():
    """Inner tasks write one row past their tile (a loop bound with its input clamped to the tile
    and its output not): the neighbour's first row, with the task's own last row's value."""
    for x in (x_random(), x_equal_rows()):
        msg = kernel_raises("6 out-of-tile write", "out_of_tile", MPKFootprintError, x=x)
        assert msg == (f"task (0, 0, 0) of layer '{LAYER}' (negctl_twice) writes outside its declared output "
                       f"tiles (first poison): {Y}: (2, 0)..(2, 159) (160 elements)"), msg
    # Equal rows: the stray write stores what the neighbour stores; test mode cannot see it.
    ks.run_test_mode(x_equal_rows(), "out_of_tile", GRID, JITTER)
    not_caught("6 out-of-tile write", "test mode, equal rows", "check_output passes (the values are equal)")
    # Random rows: wrong only when the stray write lands after the neighbour's own (the schedule's say).
    try:
        ks.run_test_mode(x_random(), "out_of_tile", GRID, JITTER)
    except AssertionError as e:
        msg = caught("6 out-of-tile write", "test mode, random rows", e)
        mismatch_of(msg)
        assert re.search(r"First mismatch at \((2|4), \d+\)", msg), msg
        assert not re.search(r"\(0, 0, 0\): \d+/320", msg), msg
    else:
        not_caught("6 out-of-tile write", "test mode, random rows",
                   "each neighbour wrote its row after the stray write")


def test_7_out_of_tensor_write():
    """The last task writes the row after the tensor's end: at kernel level the red zone after 'y'
    (640 bytes = one row past its 3840); in test mode too, where every tensor a kernel gets lies
    between red zones and guard pages (docs/runtime.md, 'Memory safety in test mode'): a Python
    exception naming the task, in this process, whose heap stays intact (the positive control runs
    after it)."""
    msg = kernel_raises("7 out-of-tensor write", "out_of_tensor", MPKFootprintError, coords=[(GRID - 1,)])
    assert msg == (f"task (2, 0, 0) of layer '{LAYER}' (negctl_twice) writes outside tensor 'y' (float32, "
                   f"(6, 160), 3840 bytes): bytes [3840, 4480) relative to its first element, past its end "
                   f"(first poison)"), msg
    msg = raises_in_test_mode("7 out-of-tensor write", "out_of_tensor", MPKMemoryError)
    assert msg.startswith(f"task (2, 0, 0) of layer '{LAYER}' wrote bytes [3840, 4480) of tensor 'y', which "
                          f"has 3840 bytes: 640 bytes past its end"), msg
    ks.run_test_mode(x_random(), "ok", GRID, JITTER)


def test_8_read_outside_the_input_tile():
    """A stencil halo clamped at the tensor's end, not the tile's: an inner task's last row reads its
    neighbour's first input row, with weight alpha = 0. The 2-poison run sees the dependence (0 x NaN);
    test mode cannot: the row it reads holds finite values, and 0 x finite adds nothing. (In a graph
    where a producer layer writes x, the read would also race with that row's producer: the event
    covers the declared tile only.)"""
    msg = kernel_raises("8 read outside the input tile", "halo_read", MPKFootprintError)
    assert msg == (f"task (0, 0, 0) of layer '{LAYER}' (negctl_twice) reads outside its declared input "
                   f"tiles: its output changes with the poison around them; it depends on tensor 'x' "
                   f"(float32, shape (6, 160), strides (160, 1)): (2, 0) (one of the elements read)"), msg
    ks.run_test_mode(x_random(), "halo_read", GRID, JITTER)
    not_caught("8 read outside the input tile", "test mode", "check_output passes (alpha * finite = 0)")


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])

"""testing.run_tasks itself (mirage/mpk/testing/kernel.py; docs/kernel_tests.md): which tasks run, what
the caller gets back, and its refusals. The footprint checks' negative controls are in
test_kernel_negative_controls.py; each layer's kernel-level test is
tests/runtime_python/<stem>/test_<stem>.py."""
import re
import shutil

import pytest
import torch

from mirage.mpk import build, testing
from mirage.mpk.poisons import is_poison

ref = testing.load_reference(__file__.replace("test_mode/test_run_tasks.py", "rmsnorm/test_rmsnorm.py"))


def rmsnorm(grid: int, threads: int = 128):
    return lambda pk, t: pk.rmsnorm_layer(input=t["x"], weight=t["w"], output=t["out"], grid_dim=(grid, 1, 1),
                                          block_dim=(threads, 1, 1))


def inputs(batch=6, hidden=96, dtype=torch.float32):
    gen = testing.generator(offset=41)
    return testing.randn((batch, hidden), dtype, gen), testing.randn((hidden,), dtype, gen)


def test_only_the_chosen_tasks_run_and_the_rest_stays_poison():
    x, w = inputs()
    out = torch.full((6, 96), 7.0)
    run = testing.run_tasks(rmsnorm(3), {"x": x, "w": w, "out": out}, coords=[(1, 0, 0)])
    assert run.coords == [(1, 0, 0)]
    got, cover = run.outputs["out"], run.covered["out"]
    assert cover[2:4].all() and not cover[:2].any() and not cover[4:].any()
    poisoned = is_poison(got.view(torch.int32), torch.float32)      # its own poison (mirage/mpk/poisons.py)
    assert poisoned[:2].all() and poisoned[4:].all() and not poisoned[2:4].any()
    # the caller's tensor receives what ran, and keeps the rest
    assert torch.equal(out[2:4], got[2:4]) and (out[:2] == 7.0).all() and (out[4:] == 7.0).all()
    run.check("out", ref.rmsnorm(x, w), testing.tol_rmsnorm(torch.float32, 96))


def test_edges_are_the_first_and_last_task():
    x, w = inputs()
    run = testing.run_tasks(rmsnorm(3), {"x": x, "w": w, "out": torch.zeros(6, 96)}, coords="edges")
    assert run.coords == [(0, 0, 0), (2, 0, 0)]


def test_the_worker_block_follows_target_cc():
    x, w = inputs()
    assert testing.run_tasks(rmsnorm(3, 256), {"x": x, "w": w, "out": torch.zeros(6, 96)},
                             target_cc=90)._harness.threads == 256
    with pytest.raises(ValueError, match=r"block_dim \(256, 1, 1\) has 256 threads, more than the 128"):
        testing.run_tasks(rmsnorm(3, 256), {"x": x, "w": w, "out": torch.zeros(6, 96)}, target_cc=80)


def test_strided_views_reach_the_kernel_with_their_strides():
    x, w = inputs(hidden=192)
    xs = x[:, 64:160]                       # a column block: row stride 192
    run = testing.run_tasks(rmsnorm(2), {"x": xs, "w": w[:96], "out": torch.zeros(6, 96)})
    assert run._harness.table[0].strides == (192, 1)
    run.check("out", ref.rmsnorm(xs, w[:96]), testing.tol_rmsnorm(torch.float32, 96))


def test_a_misaligned_view_stays_misaligned():
    """A view starting one element into its storage reaches the kernel as misaligned (to 16 bytes) as
    the caller made it, so a kernel's unaligned path is what runs (rmsnorm: the scalar path)."""
    gen = testing.generator(offset=43)
    base = testing.randn((6, 97), torch.bfloat16, gen)
    x, w = base[:, 1:], testing.randn((96,), torch.bfloat16, gen)
    assert x.data_ptr() % 16 == 2
    run = testing.run_tasks(rmsnorm(3), {"x": x, "w": w, "out": torch.zeros(6, 96, dtype=torch.bfloat16)})
    assert run._harness.buffers[0].pointer % 16 == 2
    run.check("out", ref.rmsnorm(x, w), testing.tol_rmsnorm(torch.bfloat16, 96))


def test_refusals_name_what_is_wrong():
    x, w = inputs()
    t = {"x": x, "w": w, "out": torch.zeros(6, 96)}
    with pytest.raises(ValueError, match=r"no task at grid coordinate \(5, 0, 0\) \(grid \(3, 1, 1\)\)"):
        testing.run_tasks(rmsnorm(3), t, coords=[(5, 0, 0)])
    with pytest.raises(ValueError, match="declared 2 layers; a kernel-level run takes exactly one"):
        testing.run_tasks(lambda pk, d: (rmsnorm(3)(pk, d), rmsnorm(2)(pk, d)), t)
    run = testing.run_tasks(rmsnorm(3), t)
    with pytest.raises(KeyError, match=r"no declared output 'y'; outputs: \['out'\]"):
        run.check("y", ref.rmsnorm(x, w), testing.tol_rmsnorm(torch.float32, 96))


def test_a_wrong_result_names_its_tasks():
    """Negative control of run.check: a reference that is wrong in one task's rows."""
    x, w = inputs()
    run = testing.run_tasks(rmsnorm(3), {"x": x, "w": w, "out": torch.zeros(6, 96)})
    wrong = ref.rmsnorm(x, w)
    wrong[3, 5] += 1.0
    with pytest.raises(AssertionError) as e:
        run.check("out", wrong, testing.tol_rmsnorm(torch.float32, 96))
    print(e.value)
    assert "1 / 576 elements of the tasks' tiles outside the budget" in str(e.value)
    assert "First bad element (3, 5)" in str(e.value)
    assert "Tasks with bad elements (grid coordinate): (1, 0, 0)" in str(e.value)
    # the emulation's write-watch: element (3, 5) is in thread 1's 16-byte chunk (columns 4..7)
    assert "Task (1, 0, 0): element (3, 5) was last written by thread 1 (warp 0, lane 1)" in str(e.value)


def test_a_far_overrun_is_trapped_not_a_crash(tmp_path, monkeypatch):
    """Negative control of the guard pages under a kernel-level run: rmsnorm mutated to write its
    last row 100 rows past the tensor's end (far past the red zone) is an MPKFootprintError naming
    the byte, and the process goes on (a clean run after it passes)."""
    csrc = tmp_path / "csrc"
    shutil.copytree(build.csrc_dir(), csrc)
    kernel = csrc / "tasks" / "rmsnorm.cuh"
    line = "T* yr = y + (r0 + i) * yt.row_stride;"
    far = "T* yr = y + (r0 + i + (r0 + i + 1 == xt.rows ? 100 : 0)) * yt.row_stride;"
    assert line in kernel.read_text()
    kernel.write_text(kernel.read_text().replace(line, far))
    x, w = inputs()
    monkeypatch.setenv("MPK_CSRC_DIR", str(csrc))
    with pytest.raises(testing.MPKFootprintError) as e:
        testing.run_tasks(rmsnorm(3), {"x": x, "w": w, "out": torch.zeros(6, 96)}, coords=[(2, 0, 0)])
    print(e.value)
    # the first byte the handler saw: where the kernel's threads first touched a guard page (row 105)
    assert re.match(r"task \(2, 0, 0\) of layer 'rmsnorm_0' \(rmsnorm\) wrote outside tensor 'out' "
                    r"\(float32, \(6, 96\), 2304 bytes\): byte (\d+) relative to its first element, "
                    r"\d+ bytes past its end \(a guard page trapped it", str(e.value)), str(e.value)
    assert 105 * 384 <= int(re.search(r"byte (\d+)", str(e.value)).group(1)) < 106 * 384
    monkeypatch.delenv("MPK_CSRC_DIR")
    run = testing.run_tasks(rmsnorm(3), {"x": x, "w": w, "out": torch.zeros(6, 96)})
    run.check("out", ref.rmsnorm(x, w), testing.tol_rmsnorm(torch.float32, 96))

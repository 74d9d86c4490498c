"""A task that fails (a kernel's task_fail, csrc/tasks/common.cuh) stops the pass, names itself, and leaves
the kernel usable: the next launch in the same process runs (docs/runtime.md, "A task that fails").

The scenario is the GPU check's failure stage (scripts/gpu_stages.py failure_scenario), run here on the CPU
backend, which goes through the same recorded-flag path as the GPU: a moe_w13_linear graph in test mode
(several workers, 6 tasks) whose moe_mask names an expert that does not exist, so two tasks fail; pk()
must raise MPKRuntimeError naming the layer, the grid coordinate and the kernel's message; the mask
repaired in place, pk() of the same kernel must give the exact product; then the same kernel-level
(testing.run_tasks: a failing task, then a good one).

Negative controls (the runtime's sources mutated in a copy, MPK_CSRC_DIR): a worker that does not hear of
its task's failure (its end-of-task reduction ignores the record) and a kernel-level run that ignores it:
the pass runs on, and neither path names the task; a record not reset per launch fails the clean launch
after a failure.

Run: pytest tests/runtime_python/test_mode/test_task_failure.py -s
"""
import contextlib
import os
import shutil

import pytest

from mirage.mpk import build, testing
from mirage.mpk.errors import MPKError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def stages():
    """scripts/gpu_stages.py, whose failure stage this file runs on the CPU."""
    return testing.load_reference(os.path.join(ROOT, "scripts", "gpu_stages.py"), name="gpu_stages")


@contextlib.contextmanager
def mutated_runtime(tmp_path, *edits: tuple[str, str, str]):
    """Build against a copy of csrc/ in which each (header, old, new) has runtime/header's one `old`
    replaced by `new`."""
    copy = os.path.join(str(tmp_path), "csrc")
    shutil.copytree(build.csrc_dir(), copy)
    for header, old, new in edits:
        path = os.path.join(copy, "runtime", header)
        text = open(path).read()
        assert text.count(old) == 1, f"{header}: the text this control mutates is gone (update it): {old!r}"
        open(path, "w").write(text.replace(old, new))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MPK_CSRC_DIR", copy)
        yield


def test_a_failed_task_stops_the_pass_and_the_next_launch_runs():
    r = stages().failure_scenario()
    for path, then in (("graph", "the repaired mask's next pk()"), ("kernel", "a good task then")):
        good = r[f"{path}_named"] and r[f"{path}_then_exact"]
        testing.say(f"TASK FAILURE {path}: {r[f'{path}_message']} -> named {r[f'{path}_named']}; {then} "
                    f"exact {r[f'{path}_then_exact']} {'PASS' if good else 'FAIL'}")
    assert r["ok"], r


def test_control_runs_deaf_to_the_failure_never_name_it(tmp_path):
    """executor.cuh's failure_seen always false (the failing tasks' blocks carry on and the pass ends with
    their rows unwritten) and entry.h's kernel-level run ignoring the record: neither names the task."""
    heard = "{ return ld_relaxed(&v.failure->owner) != 0; }"
    deaf = ("executor.cuh", heard, heard.replace("return", "return false &&"))
    kept = "        if (failure.owner != 0) {\n            k.message"
    ignored = ("entry.h", kept, kept.replace("failure.owner != 0", "false"))
    with mutated_runtime(tmp_path, deaf, ignored):
        r = stages().failure_scenario()
    for path in ("graph", "kernel"):
        testing.say(f"CONTROL deaf {path}: {r[path + '_message'].splitlines()[0][:120]} -> named "
                    f"{r[path + '_named']}: {'caught' if not r[path + '_named'] else 'MISSED'}")
    assert not r["graph_named"] and not r["kernel_named"], r


def test_control_a_record_kept_across_launches_fails_the_clean_launch(tmp_path):
    """host_cpu.h without the per-launch reset of the record: the repaired kernel's next pk() stops at once
    on the old failure (reported again by the task that holds the record, if it ran, else as a pass cut
    short)."""
    with mutated_runtime(tmp_path, ("host_cpu.h", "    k.control.task_failure = TaskFailure{};", "")):
        with pytest.raises(MPKError) as e:
            stages().failure_scenario()
    testing.say(f"CONTROL stale record: the clean launch raised {type(e.value).__name__}: "
                f"{str(e.value).splitlines()[0][:120]} -> caught")

"""Rank-dependent kernel paths: a layer module that reads pk.mpi_rank hands its kernel a rank flag
(linear_with_residual and silu_mul_linear_with_residual: add_residual, so that with world_size > 1 only rank
0 adds the residual and the allreduce after it counts it once). Every single-rank run takes the rank-0
path, so a kernel that ignores the flag passes all of them; each such layer's kernel-level test therefore
has a case at another rank's parameters, test_<stem>_kernel_other_rank (the layer declared as rank 1 of 2,
the run itself one process).

The scan below finds those layers at run time (a module whose code reads `.mpi_rank`) and requires the
case. Negative controls (testing.mutated_kernel: a copy of csrc/ with ONE exact string replaced): each
kernel adding the residual whatever its flag says still passes its rank-0 case and fails the other-rank
case's comparison.

Run: pytest -s tests/runtime_python/test_mode/test_rank_flag_controls.py
"""
import ast
import os
import pkgutil

import pytest
import torch

import mirage.mpk.layers
from mirage.mpk import testing

HERE = os.path.dirname(os.path.abspath(__file__))
RUNTIME_PYTHON = os.path.dirname(HERE)

pytestmark = pytest.mark.skipif(os.environ.get("MPK_TEST_DEVICE", "cpu") != "cpu",
                                reason="mutated kernels build for the CPU emulation here")

# stem -> the exact text of its kernel's rank flag, and the same kernel adding the residual on every rank
ALWAYS_ADD = {
    "silu_mul_linear_with_residual": ("v.iparam(0) != 0 ? v.in<const T>(2) : nullptr", "v.in<const T>(2)"),
    "linear_with_residual": ("const bool add_residual = v.iparam(0) != 0;",
                             "const bool add_residual = true;"),
}


def rank_flag_layers() -> list[str]:
    """Layer stems whose module's code reads `.mpi_rank` (the rank decides a kernel parameter)."""
    folder = mirage.mpk.layers.__path__[0]
    found = []
    for m in pkgutil.iter_modules([folder]):
        with open(os.path.join(folder, f"{m.name}.py")) as f:
            tree = ast.parse(f.read())
        if not m.name.startswith("_") and any(isinstance(n, ast.Attribute) and n.attr == "mpi_rank"
                                              for n in ast.walk(tree)):
            found.append(m.name)
    return sorted(found)


def kernel_test(stem: str):
    return testing.load_reference(os.path.join(RUNTIME_PYTHON, stem, "x.py"), name=f"test_{stem}")


def test_rank_flag_layers_have_an_other_rank_case():
    stems = rank_flag_layers()
    print(f"layers with a rank flag: {', '.join(stems)}")
    assert set(ALWAYS_ADD) <= set(stems), f"the .mpi_rank scan found {stems}"
    missing = [s for s in stems if not hasattr(kernel_test(s), f"test_{s}_kernel_other_rank")]
    assert not missing, (f"layers whose kernel takes a rank flag without a kernel-level case at another "
                         f"rank (test_<stem>_kernel_other_rank in tests/runtime_python/<stem>/"
                         f"test_<stem>.py): {missing}")


@pytest.mark.parametrize("stem", sorted(ALWAYS_ADD))
def test_residual_added_on_every_rank_fails_the_other_rank_case(stem, tmp_path):
    mod = kernel_test(stem)
    case = getattr(mod, f"test_{stem}_kernel_other_rank")
    with testing.mutated_kernel(tmp_path, f"{stem}.cuh", *ALWAYS_ADD[stem]):
        case(torch.float32, rank=(0, 1))
        testing.say(f"SURVIVES {stem}: the kernel adding the residual on every rank passes the rank-0 case")
        with pytest.raises(AssertionError) as e:
            case(torch.float32)
    msg = str(e.value)
    testing.say(f"CAUGHT {stem} rank-flag control: {msg.splitlines()[0]}")
    assert "is not close" in msg, msg

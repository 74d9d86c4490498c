"""MPK's test-mode quick start, as an MPK user writes it, with only the two allowed changes:
device="cuda" -> "cpu", and no torch.cuda.synchronize(). The comparison goes through
mirage.mpk.testing (evidence line, error-budget tolerance) instead of MPK's atol=rtol=1e-2.

Run: python tests/runtime_python/test_mode/test_mpk_style_rmsnorm.py   (or pytest this file)
"""
import os
import sys

import torch

import mirage
from mirage.mpk import testing
from mirage.mpk.persistent_kernel import PersistentKernel

HERE = os.path.dirname(os.path.abspath(__file__))
ref = testing.load_reference(os.path.join(HERE, "..", "rmsnorm", "x.py"))


def main(output_dir="./test_output"):
    torch.manual_seed(42)
    num_workers, num_schedulers = mirage.get_configurations_from_gpu(0)
    params = PersistentKernel.get_default_init_parameters()
    params["test_mode"] = True
    params["num_workers"] = num_workers
    params["num_local_schedulers"] = num_schedulers
    pk = PersistentKernel(**params)
    x = torch.randn(16, 4096, dtype=torch.bfloat16, device="cpu")
    w = torch.randn(4096, dtype=torch.bfloat16, device="cpu")
    out = torch.zeros(16, 4096, dtype=torch.bfloat16, device="cpu")
    x_dt = pk.attach_input(x, name="x"); w_dt = pk.attach_input(w, name="w")  # noqa: E702 (MPK's line)
    out_dt = pk.attach_input(out, name="out")
    block_dim = (256, 1, 1) if pk.target_cc >= 90 else (128, 1, 1)
    pk.rmsnorm_layer(input=x_dt, weight=w_dt, output=out_dt, grid_dim=(16, 1, 1), block_dim=block_dim)
    pk.compile(output_dir=output_dir)   # saves .cu and .json for debugging
    pk()
    # (MPK: torch.cuda.synchronize() here; a CPU launch has already finished.)
    # MPK compares with a float32 torch rmsnorm, atol=rtol=1e-2 for bf16; here: the shared float64
    # reference and the error budget of mirage.mpk.testing.
    expected, name = ref.rmsnorm(x, w), "mpk_style_rmsnorm.out"
    testing.assert_close(name, out, expected, testing.tol_rmsnorm(torch.bfloat16, 4096))
    testing.check_nonvacuous(name, out, pk.layers[0].checks, inputs=(x,), reference=expected)
    pk.finalize()
    print(f"generated code and task graph: {pk.output_files[0]}, {pk.output_files[1]}")


def test_mpk_style_rmsnorm(tmp_path):
    main(output_dir=str(tmp_path))


if __name__ == "__main__":
    main()
    print("MPK-style rmsnorm PASS")
    sys.exit(0)

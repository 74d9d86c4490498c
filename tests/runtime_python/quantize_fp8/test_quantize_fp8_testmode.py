"""quantize_fp8_layer in test mode: real generated code, several workers, schedule jitter.

Codes within half an e4m3 ulp of the unrounded quotients (tol_elementwise(float8_e4m3)), scales within
fp32's rounding of amax / 448 (pytorch_reference.py); both group sizes, 2-D and 3-D inputs, and MPK's
DeepSeek-V3 activation row (K = 7168, group 128, one task per row as MPK's builder splits it); and the
UE8M0 scales (scale_ue8m0=True): the packed words exactly, the padding columns unwritten.
Run: python tests/runtime_python/quantize_fp8/test_quantize_fp8_testmode.py
     python -m pytest tests/runtime_python/quantize_fp8/test_quantize_fp8_testmode.py
     mpirun -n 4 python tests/runtime_python/quantize_fp8/test_quantize_fp8_testmode.py
     (one 4-rank job: the layer is replicated (its module's TP), so every rank runs every case on
     the same full inputs and the outputs must be bit-identical across ranks; run_cases_as_script)
"""

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.dtypes import float8_e4m3
from mirage.mpk.errors import MPKUnwrittenError
from mirage.mpk.persistent_kernel import PersistentKernel

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# (rows, cols, grid.x): even split, non-power-of-two split (3 tiles of 2 rows), one-row tiles, one task;
# and MPK's shape, one task per row
SHAPES = [(16, 1024, 4), (6, 384, 3), (5, 128, 5), (1, 256, 1), (16, 7168, 16)]
GROUPS = {(6, 384, 3): 64, (1, 256, 1): 64}       # the rest: 128


def run_case(dtype, rows, cols, grid, jitter=0, output_dir=None, world=testing.ONE_RANK, topk=None):
    group = GROUPS.get((rows, cols, grid), 128)
    gen = testing.generator(offset=rows * 1000 + cols)
    shape = (rows, cols) if topk is None else (rows, topk, cols)
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=jitter, **world.params))
    x = testing.randn(shape, dtype, gen)
    q = torch.zeros(shape, dtype=torch.float8_e4m3fn)
    s = torch.zeros(*shape[:-1], cols // group)
    x_dt, q_dt = pk.attach_input(x, name="x"), pk.attach_input(q, name="q")
    s_dt = pk.attach_input(s, name="s")
    pk.quantize_fp8_layer(input=x_dt, output_fp8=q_dt, output_scale=s_dt, grid_dim=(grid, 1, 1),
                          block_dim=(128, 1, 1), scale_ue8m0=False, group_size=group)
    pk.compile(output_dir=output_dir)
    pk()
    pk.finalize()
    codes, scale = ref.quantize_fp8(x, group)
    name = f"quantize_fp8[{str(dtype)[6:]},{'x'.join(map(str, shape))},grid={grid},group={group}{world.tag}]"
    checks = pk.layers[0].checks
    testing.check_output(name + ".q", q, codes, testing.tol_elementwise(float8_e4m3), checks, pk=pk)
    testing.check_output(name + ".s", s, scale, testing.tol_elementwise(torch.float32), checks, pk=pk)
    return pk


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("rows,cols,grid", SHAPES)
def test_quantize_fp8(dtype, rows, cols, grid):
    run_case(dtype, rows, cols, grid, jitter=rows)


def test_quantize_fp8_3d():
    """The MoE activations [batch, topk, I], split by batch (MPK quantizes w2's input this way)."""
    run_case(torch.bfloat16, 6, 256, 3, jitter=2, topk=4)


@pytest.mark.parametrize("rows,cols,grid", [(5, 640, 5), (6, 384, 3), (16, 7168, 16)])
def test_quantize_fp8_ue8m0(rows, cols, grid):
    """scale_ue8m0=True (MPK's default, what linear_fp8 takes): the packed words exactly in every row's
    column (the padding columns no task writes keep test mode's poison), the codes within half an e4m3 ulp
    of x / 2^ceil(log2 s); 5 rows: 3 padding columns; 640 columns: a word with one code."""
    from mirage.mpk.layers.quantize_fp8 import packed_scale_shape
    from mirage.mpk.poisons import is_poison
    group = GROUPS.get((rows, cols, grid), 128)
    x = testing.randn((rows, cols), torch.bfloat16, testing.generator(offset=rows * 1000 + cols + 1))
    q = torch.zeros(rows, cols, dtype=torch.float8_e4m3fn)
    s = torch.zeros(packed_scale_shape(rows, cols, group), dtype=torch.uint32)
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=rows))
    t = [pk.attach_input(v, name=n) for v, n in ((x, "x"), (q, "q"), (s, "s"))]
    pk.quantize_fp8_layer(input=t[0], output_fp8=t[1], output_scale=t[2], grid_dim=(grid, 1, 1),
                          block_dim=(128, 1, 1), scale_ue8m0=True, group_size=group)
    pk.compile()
    pk()
    pk.finalize()
    codes, words, _ = ref.quantize_fp8_ue8m0(x, group)
    name = f"quantize_fp8[ue8m0,bfloat16,{rows}x{cols},grid={grid},group={group}]"
    testing.check_output(name + ".q", q, codes, testing.tol_elementwise(float8_e4m3), pk.layers[0].checks,
                         pk=pk)
    got = s.view(torch.int32).long() & 0xFFFFFFFF
    testing.assert_equal(name + ".s words", got[:, :rows], words[:, :rows])
    padding = s.view(torch.int32)[:, rows:]
    assert bool(is_poison(padding, s.dtype).all()), f"{name}: a padding column was written"


def test_an_unwritten_code_is_named(tmp_path):
    """Negative control of the one-byte output poison (mirage/mpk/written.py: 0xFF, a NaN no conversion
    writes): a kernel whose lane 31 stores no code is an MPKUnwrittenError naming the tensor."""
    with testing.mutated_kernel(tmp_path, "quantize_fp8.cuh", "q[r * qt.row_stride",
                                "if (lane != 31) q[r * qt.row_stride"):   # quantize_block: both formats
        with pytest.raises(MPKUnwrittenError, match=r"quantize_fp8.*'q'") as e:
            run_case(torch.bfloat16, 6, 384, 3)
    testing.say(f"UNWRITTEN (must be raised) {' '.join(str(e.value).split())[:300]} PASS")


def test_bad_arguments_are_named():
    pk = PersistentKernel(**testing.cpu_config())
    x = pk.attach_input(torch.zeros(4, 192, dtype=torch.bfloat16), name="x")
    q = pk.attach_input(torch.zeros(4, 192, dtype=torch.float8_e4m3fn), name="q")
    s = pk.attach_input(torch.zeros(4, 3), name="s")
    call = dict(input=x, output_fp8=q, output_scale=s, grid_dim=(2, 1, 1), block_dim=(128, 1, 1))
    with pytest.raises(ValueError, match=r"'s' \(output_scale\) dim 0 is 4, expected 1 .* expected \(1, 4\)"):
        pk.quantize_fp8_layer(**call, group_size=64)        # UE8M0: [packed_k, aligned rows] words
    w = pk.attach_input(torch.zeros(1, 4), name="w")
    with pytest.raises(ValueError, match="'w' .output_scale. has dtype float32, expected uint32"):
        pk.quantize_fp8_layer(**{**call, "output_scale": w}, group_size=64)
    with pytest.raises(ValueError, match="multiple of group_size 128"):
        pk.quantize_fp8_layer(**call, scale_ue8m0=False)
    with pytest.raises(ValueError, match=r"group_size must be one of \(64, 128\)"):
        pk.quantize_fp8_layer(**call, scale_ue8m0=False, group_size=96)
    s2 = pk.attach_input(torch.zeros(4, 2), name="s2")
    with pytest.raises(ValueError, match="'s2'.*dim 1 is 2, expected 3"):
        pk.quantize_fp8_layer(**{**call, "output_scale": s2}, scale_ue8m0=False, group_size=64)
    with pytest.raises(ValueError, match="'x' .output_fp8. has dtype bfloat16, expected float8_e4m3"):
        pk.quantize_fp8_layer(**{**call, "output_fp8": x}, scale_ue8m0=False, group_size=64)
    pk.finalize()


if __name__ == "__main__":
    testing.run_cases_as_script("quantize_fp8", run_case, DTYPES, SHAPES)

"""Bad input fails early, in Python, with a message naming the layer, tensor and sizes.

One test per case; each asserts on the text a user would read. Run: pytest tests/unit/test_bad_input.py
Only the compile-related cases build a module (the identity kernel, once per session cache).
"""
import re

import pytest
import torch

from mirage.mpk.persistent_kernel import PersistentKernel

BLOCK = (128, 1, 1)


def new_pk(**kw) -> PersistentKernel:
    params = PersistentKernel.get_default_init_parameters()
    params.update(test_mode=True, num_workers=3, num_local_schedulers=2)
    params.update(kw)
    return PersistentKernel(**params)


def rmsnorm_kernel(batch=6, hidden=64, *, w_dtype=torch.float32, w_len=None, **pk_kw):
    pk = new_pk(**pk_kw)
    x = pk.attach_input(torch.randn(batch, hidden), name="x")
    w = pk.attach_input(torch.randn(w_len or hidden, dtype=w_dtype), name="w")
    out = pk.attach_input(torch.zeros(batch, hidden), name="out")
    return pk, x, w, out


def identity_kernel(**pk_kw) -> PersistentKernel:
    pk = new_pk(**pk_kw)
    x = pk.attach_input(torch.randn(4, 8), name="x")
    y = pk.attach_input(torch.zeros(4, 8), name="y")
    pk.identity_layer(input=x, output=y, grid_dim=(2, 1, 1), block_dim=BLOCK)
    return pk


# ---- tensors -------------------------------------------------------------------------------

def test_non_contiguous_tensor():
    pk = new_pk()
    with pytest.raises(ValueError) as e:
        pk.attach_input(torch.zeros(4, 8).t(), name="xt")
    msg = str(e.value)
    assert "'xt'" in msg and "not contiguous" in msg
    assert "(8, 4)" in msg and "(1, 8)" in msg, msg          # shape and strides
    assert ".contiguous()" in msg                              # the fix


def test_duplicate_name():
    pk = new_pk()
    pk.attach_input(torch.zeros(4), name="x")
    with pytest.raises(ValueError, match=r"tensor name 'x' is already used"):
        pk.attach_input(torch.zeros(4), name="x")
    with pytest.raises(ValueError, match=r"tensor name 'x' is already used"):
        pk.new_tensor(dims=(4,), name="x")


@pytest.mark.parametrize("bad", ["1x", "x-y", "a b", "", "int", "class", None])
def test_name_not_a_c_identifier(bad):
    pk = new_pk()
    with pytest.raises(ValueError) as e:
        pk.attach_input(torch.zeros(4), name=bad)
    assert f"tensor name {bad!r} is not a valid C identifier" in str(e.value)


def test_unsupported_dtype_names_the_tensor():
    pk = new_pk()
    with pytest.raises(TypeError) as e:
        pk.attach_input(torch.zeros(4, 8, dtype=torch.float64), name="x64")
    msg = str(e.value)
    assert "'x64'" in msg and "(4, 8)" in msg and "torch.float64" in msg
    assert "supported: bfloat16, float16, float32" in msg, msg


def test_dtype_mismatch():
    pk, x, w, out = rmsnorm_kernel(w_dtype=torch.float16)
    with pytest.raises(ValueError) as e:
        pk.rmsnorm_layer(input=x, weight=w, output=out, grid_dim=(6, 1, 1), block_dim=BLOCK)
    assert str(e.value) == ("layer 'rmsnorm_0': tensor 'w' (weight) has dtype float16, expected float32")


def test_shape_mismatch():
    pk, x, w, out = rmsnorm_kernel(hidden=64, w_len=65)
    with pytest.raises(ValueError) as e:
        pk.rmsnorm_layer(input=x, weight=w, output=out, grid_dim=(6, 1, 1), block_dim=BLOCK)
    msg = str(e.value)
    assert msg.startswith("layer 'rmsnorm_0': tensor 'w' (weight) dim 0 is 65, expected 64"), msg
    assert "(65,)" in msg and "(64,)" in msg


def test_output_shape_mismatch():
    pk = new_pk()
    x = pk.attach_input(torch.zeros(4, 8), name="x")
    y = pk.attach_input(torch.zeros(4, 6), name="y")
    with pytest.raises(ValueError) as e:
        pk.identity_layer(input=x, output=y, grid_dim=(1, 1, 1), block_dim=BLOCK)
    assert "layer 'identity_0': tensor 'y' (output) dim 1 is 6, expected 8" in str(e.value)


def test_grid_does_not_divide_lists_divisors():
    pk, x, w, out = rmsnorm_kernel(batch=6)
    with pytest.raises(ValueError) as e:
        pk.rmsnorm_layer(input=x, weight=w, output=out, grid_dim=(4, 1, 1), block_dim=BLOCK)
    msg = str(e.value)
    assert msg.startswith("layer 'rmsnorm_0': tensor 'x' (input) dim 0 (6) is not divisible by "
                          "grid_dim.x=4"), msg
    assert msg.endswith("grid sizes that divide 6: 1, 2, 3, 6"), msg


def test_grid_divisor_list_is_capped():
    pk = new_pk()
    x = pk.attach_input(torch.zeros(2, 720), name="x")      # grid.x splits an identity's last dim
    y = pk.attach_input(torch.zeros(2, 720), name="y")
    with pytest.raises(ValueError) as e:
        pk.identity_layer(input=x, output=y, grid_dim=(7, 1, 1), block_dim=BLOCK)
    # 720 has 30 divisors: the first 12, then an ellipsis
    assert str(e.value).endswith("grid sizes that divide 720: 1, 2, 3, 4, 5, 6, 8, 9, 10, 12, 15, 16, ...")


def test_meta_device_tensor():
    pk = new_pk()
    with pytest.raises(ValueError) as e:
        pk.attach_input(torch.empty(4, 8, device="meta"), name="xm")
    msg = str(e.value)
    assert "tensor 'xm' is on device 'meta'" in msg and "attach cpu tensors" in msg, msg
    # nothing was registered: the name is still free
    pk.attach_input(torch.zeros(4, 8), name="xm")


def test_backend_cuda_with_cpu_tensors():
    pk = new_pk(backend="cuda")
    with pytest.raises(ValueError) as e:
        pk.attach_input(torch.zeros(4, 8), name="x")
    assert str(e.value) == "tensor 'x' is on cpu but backend='cuda'; move it to cuda"


def test_unknown_backend():
    with pytest.raises(ValueError, match=r"backend='tpu'; expected one of \('auto', 'cpu', 'cuda'\)"):
        new_pk(backend="tpu")


def test_aliasing_attached_tensors():
    pk = new_pk()
    base = torch.zeros(8, 4)
    pk.attach_input(base, name="x")
    with pytest.raises(ValueError) as e:
        pk.attach_input(base[2:6], name="x_rows")      # a contiguous view into x
    msg = str(e.value)
    assert "tensor 'x_rows' shares memory with 'x'" in msg and "attach the base tensor once" in msg
    with pytest.raises(ValueError, match="tensor 'x_again' shares memory with 'x'"):
        pk.attach_input(base, name="x_again")


# ---- layers --------------------------------------------------------------------------------

def test_unknown_layer_name():
    pk = new_pk()
    with pytest.raises(AttributeError) as e:
        pk.rms_norm_layer(input=None, output=None, grid_dim=(1, 1, 1), block_dim=BLOCK)
    msg = str(e.value)
    assert "PersistentKernel has no layer 'rms_norm_layer'" in msg
    assert "rmsnorm_layer" in msg and "identity_layer" in msg, msg   # the known ones, to spot the typo


def test_positional_layer_args():
    """MPK's argument order works positionally; a wrong count names the layer and its arguments."""
    pk, x, w, out = rmsnorm_kernel()
    pk.rmsnorm_layer(x, w, out, (6, 1, 1), BLOCK)
    assert pk.layers[0].inputs[0].tensor is x and pk.layers[0].outputs[0].tensor is out
    with pytest.raises(TypeError) as e:
        pk.rmsnorm_layer(x, w, out, (6, 1, 1), BLOCK, 1e-6, "one too many")
    assert str(e.value) == ("rmsnorm_layer: too many positional arguments; its arguments are (input, weight, "
                            "output, grid_dim, block_dim, eps=1e-06)")
    with pytest.raises(TypeError, match=r"rmsnorm_layer: multiple values for argument 'input'"):
        pk.rmsnorm_layer(x, w, out, (6, 1, 1), BLOCK, input=x)
    assert len(pk.layers) == 1


def test_missing_layer_argument():
    pk, x, w, out = rmsnorm_kernel()
    with pytest.raises(TypeError, match="output"):
        pk.rmsnorm_layer(input=x, weight=w, grid_dim=(6, 1, 1), block_dim=BLOCK)


def test_layer_arg_not_a_dtensor():
    pk, x, w, out = rmsnorm_kernel()
    with pytest.raises(TypeError) as e:
        pk.rmsnorm_layer(input=torch.zeros(6, 64), weight=w, output=out, grid_dim=(6, 1, 1), block_dim=BLOCK)
    assert str(e.value) == ("layer 'rmsnorm_0': 'input' must be a DTensor from attach_input/new_tensor, "
                            "got Tensor")


def test_tensor_of_another_kernel():
    pk, x, w, out = rmsnorm_kernel()
    other = new_pk()
    w2 = other.attach_input(torch.randn(64), name="w")
    with pytest.raises(ValueError, match="layer 'rmsnorm_0': tensor 'w' belongs to another kernel"):
        pk.rmsnorm_layer(input=x, weight=w2, output=out, grid_dim=(6, 1, 1), block_dim=BLOCK)


@pytest.mark.parametrize("grid", [(0, 1, 1), (1, 2, 3, 4), (2.0, 1, 1), (True, 1, 1)])
def test_grid_dim_not_positive_ints(grid):
    pk, x, w, out = rmsnorm_kernel()
    with pytest.raises(ValueError, match=r"layer 'rmsnorm_0': grid_dim must be 1 to 3 positive ints"):
        pk.rmsnorm_layer(input=x, weight=w, output=out, grid_dim=grid, block_dim=BLOCK)


def test_grid_axis_does_not_split_output():
    pk = new_pk()
    a = pk.attach_input(torch.zeros(4, 8), name="a")
    b = pk.attach_input(torch.zeros(4, 8), name="b")
    y = pk.attach_input(torch.zeros(4, 8), name="y")
    with pytest.raises(ValueError) as e:
        pk.elementwise_add_layer(input_a=a, input_b=b, output=y, grid_dim=(2, 1, 3), block_dim=BLOCK)
    assert str(e.value) == ("layer 'elementwise_add_0': grid_dim.z=3 does not split output 'y'; "
                            "its 3 tasks would write the same elements")


def test_fused_tile_straddles_two_inputs():
    pk = new_pk()
    a = pk.attach_input(torch.zeros(2, 8), name="a")
    b = pk.attach_input(torch.zeros(4, 8), name="b")
    f = pk.fuse_tensors([a, b], fused_dim=0, num_groups=1, name="ab")   # rows [a 0:2 | b 0:4]
    y = pk.attach_input(torch.zeros(6, 8), name="y")
    with pytest.raises(ValueError) as e:   # grid.y 2: tiles of 3 rows, [0, 3) crosses the a|b edge at row 2
        pk.identity_layer(input=f, output=y, grid_dim=(1, 2, 1), block_dim=BLOCK)
    msg = str(e.value)
    assert msg.startswith("layer 'identity_0': tile rows [0, 3) of fused tensor 'ab' (input, 6 rows split "
                          "2 ways) straddle two inputs (a chunk ends at row 2)"), msg
    assert msg.endswith("grid sizes that keep tiles inside one input: 3, 6"), msg
    # grid 1 (one tile of all 6 rows) straddles too; grid 3 is fine
    with pytest.raises(ValueError, match=r"tile rows \[0, 6\) of fused tensor 'ab'"):
        pk.identity_layer(input=f, output=y, grid_dim=(1, 1, 1), block_dim=BLOCK)
    pk.identity_layer(input=f, output=y, grid_dim=(1, 3, 1), block_dim=BLOCK)


def test_fused_view_as_output():
    pk = new_pk()
    a = pk.attach_input(torch.zeros(2, 8), name="a")
    b = pk.attach_input(torch.zeros(2, 8), name="b")
    f = pk.fuse_tensors([a, b], fused_dim=0, num_groups=1, name="ab")
    x = pk.attach_input(torch.zeros(4, 8), name="x")
    with pytest.raises(ValueError, match="layer 'identity_0': output 'ab' is a fused view; views are inputs"):
        pk.identity_layer(input=x, output=f, grid_dim=(1, 2, 1), block_dim=BLOCK)


# ---- compile and run order -----------------------------------------------------------------

def test_pk_before_compile():
    pk = identity_kernel()
    with pytest.raises(RuntimeError, match=r"^pk\(\) called before compile\(\)$"):
        pk()


def test_compile_twice():
    pk = identity_kernel()
    pk.compile()
    with pytest.raises(RuntimeError, match=r"compile\(\): this PersistentKernel was already compiled"):
        pk.compile()
    pk.finalize()


def test_layer_added_after_compile():
    pk = identity_kernel()
    pk.compile()
    x, y = pk.tensors["x"], pk.tensors["y"]
    with pytest.raises(RuntimeError) as e:
        pk.identity_layer(input=y, output=x, grid_dim=(1, 1, 1), block_dim=BLOCK)
    assert str(e.value) == ("identity_layer after compile(): the graph is frozen; build a new "
                            "PersistentKernel")
    with pytest.raises(RuntimeError, match=r"attach_input after compile\(\)"):
        pk.attach_input(torch.zeros(2), name="late")
    assert len(pk.layers) == 1
    pk.finalize()


def test_pk_after_finalize():
    pk = identity_kernel()
    pk.compile()
    pk.finalize()
    with pytest.raises(RuntimeError, match=r"pk\(\) called after finalize\(\)"):
        pk()


def test_compile_without_layers():
    pk = new_pk()
    pk.attach_input(torch.zeros(4), name="x")
    with pytest.raises(RuntimeError, match=r"the kernel has no layers: add at least one \*_layer"):
        pk.compile()


def test_unknown_compile_and_launch_kwargs():
    pk = identity_kernel()
    with pytest.raises(TypeError, match=r"compile\(\) got unexpected keyword\(s\) \['outdir'\]"):
        pk.compile(outdir="x")
    with pytest.raises(TypeError, match=r"pk\(\) got unexpected keyword\(s\) \['stream'\]"):
        pk(stream=None)


# ---- meta tensors ---------------------------------------------------------------------------

def test_meta_override_wrong_dtype():
    pk = identity_kernel(meta_tensors={"step": torch.zeros(1, dtype=torch.int64)})
    with pytest.raises(ValueError) as e:
        pk.compile()
    assert str(e.value) == "meta tensor 'step' has dtype torch.int64, expected torch.int32"


def test_meta_override_wrong_shape():
    pk = identity_kernel(max_num_batched_requests=2,
                         meta_tensors={"qo_indptr_buffer": torch.zeros(2, dtype=torch.int32)})
    with pytest.raises(ValueError) as e:
        pk.compile()
    msg = str(e.value)
    assert msg.startswith("meta tensor 'qo_indptr_buffer' has shape (2,), expected (3,)"), msg
    assert "max_num_batched_requests=2" in msg


def test_meta_override_step_disagrees_with_tokens():
    tokens = torch.zeros(2, 4, dtype=torch.int64)         # 2 requests
    step = torch.zeros(3, dtype=torch.int32)               # 3 requests
    pk = identity_kernel(max_seq_length=4, meta_tensors={"tokens": tokens, "step": step})
    with pytest.raises(ValueError) as e:
        pk.compile()
    msg = str(e.value)
    assert msg.startswith("meta tensor 'step' has shape (3,), expected (2,) (total_num_requests=2"), msg


def test_max_seq_length_disagrees_with_tokens():
    pk = identity_kernel(max_seq_length=4, meta_tensors={"tokens": torch.zeros(1, 5, dtype=torch.int64)})
    with pytest.raises(ValueError) as e:
        pk.compile()
    assert str(e.value) == ("meta tensor 'tokens' has shape (1, 5) but max_seq_length is 4: "
                            "tokens.shape[1] must equal max_seq_length")


def test_unknown_meta_tensor():
    pk = identity_kernel(meta_tensors={"steps": torch.zeros(1, dtype=torch.int32)})
    with pytest.raises(ValueError, match=re.escape("unknown meta tensor(s) ['steps']; known: ['tokens', ")):
        pk.compile()


def test_meta_override_on_wrong_device():
    pk = identity_kernel(meta_tensors={"step": torch.zeros(1, dtype=torch.int32, device="meta")})
    with pytest.raises(ValueError, match="meta tensor 'step' is on meta but the kernel runs on cpu"):
        pk.compile()


# ---- meta tensor values (mirage/mpk/meta.py: check_requests before a test-mode launch, check_batch before a
# kernel-level run); no compile: the checks take the parameters and the tensors

META_P = dict(max_seq_length=8, max_num_batched_requests=2, max_num_batched_tokens=5, max_num_pages=4,
              page_size=4)
# a layout at every bound (a kernel-level run's, as a caller writes it): 2 requests, slot 0 with 3 rows
# and pages [3, 0], slot 1 with 2 rows and pages [1, 2]; last pages full; step at max_seq_length
GOOD_META = dict(qo_indptr_buffer=[0, 3, 5], paged_kv_indptr_buffer=[0, 2, 4],
                 paged_kv_indices_buffer=[3, 0, 1, 2], paged_kv_last_page_len_buffer=[4, 1],
                 request_ids=[1, 0], num_new_tokens=[5], step=[8, 0], prompt_lengths=[8, 1])


def meta_values(**change) -> dict:
    from mirage.mpk.meta import build_meta

    given = {k: torch.tensor(v, dtype=torch.int32) for k, v in {**GOOD_META, **change}.items()}
    return build_meta(META_P, given, torch.device("cpu"))


# (the rule, the change to GOOD_META, the message: the meta tensor, the entry, the value, the bound)
BAD_META_VALUES = [
    ("indptr starts at 0", dict(qo_indptr_buffer=[1, 3, 5]),
     "meta tensor 'qo_indptr_buffer'[0] = 1, expected 0 (an indptr starts at 0)"),
    ("indptr never decreases", dict(paged_kv_indptr_buffer=[0, 3, 2]),
     "meta tensor 'paged_kv_indptr_buffer'[2] = 2 < [1] = 3 (an indptr never decreases)"),
    ("qo within the batch's rows", dict(qo_indptr_buffer=[0, 3, 6]),
     "meta tensor 'qo_indptr_buffer'[2] = 6 > max_num_batched_tokens (5), the batch's rows"),
    ("kv within max_num_pages", dict(paged_kv_indptr_buffer=[0, 2, 536870913]),
     "meta tensor 'paged_kv_indptr_buffer'[2] = 536870913 > max_num_pages (4)"),
    ("page index in the cache", dict(paged_kv_indices_buffer=[3, 0, 4, 2]),
     "meta tensor 'paged_kv_indices_buffer'[2] = 4 > max_num_pages - 1 (3), the cache's last page"),
    ("page index not negative", dict(paged_kv_indices_buffer=[3, -1, 1, 2]),
     "meta tensor 'paged_kv_indices_buffer'[1] = -1 < 0"),
    ("last_page_len at least 1", dict(paged_kv_last_page_len_buffer=[4, 0]),
     "meta tensor 'paged_kv_last_page_len_buffer'[1] = 0 < 1"),
    ("last_page_len at most page_size", dict(paged_kv_last_page_len_buffer=[5, 1]),
     "meta tensor 'paged_kv_last_page_len_buffer'[0] = 5 > page_size (4)"),
    ("request id of a slot with tokens", dict(request_ids=[1, 2]),
     "meta tensor 'request_ids'[1] = 2 > total_num_requests - 1 (1)"),
    ("num_new_tokens within the rows", dict(num_new_tokens=[6]),
     "meta tensor 'num_new_tokens'[0] = 6 > max_num_batched_tokens (5)"),
    ("step fits max_seq_length", dict(step=[9, 0]), "meta tensor 'step'[0] = 9 > max_seq_length (8)"),
    ("step not negative", dict(step=[0, -3]), "meta tensor 'step'[1] = -3 < 0"),
    ("prompt at least 1", dict(prompt_lengths=[8, 0]), "meta tensor 'prompt_lengths'[1] = 0 < 1"),
    ("prompt fits max_seq_length", dict(prompt_lengths=[9, 1]),
     "meta tensor 'prompt_lengths'[0] = 9 > max_seq_length (8)"),
]


@pytest.mark.parametrize("rule,change,message", BAD_META_VALUES,
                         ids=[c[0].replace(" ", "_") for c in BAD_META_VALUES])
def test_meta_values_out_of_bounds(rule, change, message):
    from mirage.mpk.meta import check_batch

    check_batch(META_P, meta_values())      # the control: the same layout at its bounds passes
    with pytest.raises(ValueError) as e:
        check_batch(META_P, meta_values(**change))
    assert str(e.value).startswith(message) and "docs/runtime.md" in str(e.value), str(e.value)
    print(f"BAD_META {rule}: {str(e.value)[:140]} PASS")


def test_meta_values_of_unused_entries_are_free():
    """Entries no kernel reads may hold anything (prepare_next_batch leaves them stale): pages past the last
    slot's, last_page_len of a slot without pages, the request id of a slot without tokens."""
    from mirage.mpk.meta import check_batch

    check_batch(META_P, meta_values(qo_indptr_buffer=[0, 3, 3], paged_kv_indptr_buffer=[0, 2, 2],
                                    paged_kv_indices_buffer=[3, 0, -7, 99],
                                    paged_kv_last_page_len_buffer=[4, 0], request_ids=[1, -1]))


def test_meta_values_checked_before_a_test_mode_launch():
    """A value changed after compile() (a caller writing into the meta tensor) is refused at pk(), before
    init_kernel could see it."""
    pk = identity_kernel(max_seq_length=4, meta_tensors={"step": torch.zeros(1, dtype=torch.int32)})
    pk.compile()
    pk.get_tensor("step")[0] = 5
    with pytest.raises(ValueError, match=re.escape("meta tensor 'step'[0] = 5 > max_seq_length (4)")):
        pk()
    pk.get_tensor("step")[0] = 4             # at the bound: runs (nothing to compute is init_kernel's to say)
    with pytest.raises(Exception, match="scheduled no token"):
        pk()
    pk.finalize()


@pytest.mark.parametrize("key,value", [("max_seq_length", 0), ("page_size", -1), ("num_workers", 1.5)])
def test_non_positive_params(key, value):
    with pytest.raises(ValueError, match=f"PersistentKernel: {key} must be a positive int, got {value!r}"):
        new_pk(**{key: value})


def test_linear_in_place_is_refused():
    """The kernel reads whole input (and weight) rows while other threads store outputs."""
    pk = new_pk()
    x = pk.attach_input(torch.zeros(4, 8), name="x")
    w = pk.attach_input(torch.zeros(8, 8), name="w")
    r = pk.attach_input(torch.zeros(4, 8), name="r")
    with pytest.raises(ValueError, match=r"layer 'linear_0': output 'x' shares storage with the input 'x': "
                                         r"a linear cannot run in place"):
        pk.linear_layer(input=x, weight=w, output=x, grid_dim=(1, 1, 1), block_dim=BLOCK)
    square = pk.attach_input(torch.zeros(8, 8), name="square")
    with pytest.raises(ValueError, match=r"output 'w' shares storage with the weight 'w'"):
        pk.linear_layer(input=square, weight=w, output=w, grid_dim=(1, 1, 1), block_dim=BLOCK)
    pk.linear_with_residual_layer(input=x, weight=w, residual=r, output=r, grid_dim=(2, 1, 1),
                                  block_dim=BLOCK)          # the residual may be the output

"""Verification helpers for layer tests: error-budget tolerances, comparison with one evidence line per
tensor, diagnosis of a failure, scalar-parameter checks, a test file's cases and its multi-rank job.

One import for a test file (`from mirage.mpk import testing`); each concern is a module:
  tolerances  the one tolerance function and its error-budget derivation (module docstring)
  evidence    compare in float64, the EVIDENCE line, digest
  checks      assert_close / assert_equal / check_output and the non-vacuity checks
  diagnosis   bad tiles by grid coordinate, the first divergent layer, NaN payloads, the serial re-run
  keep        a failing case's files (source, task graph, module, tensors) in a directory
  scalars     check_scalars: does a case exercise a layer's scalar parameters
  kernel      run_tasks: one layer's tasks alone, with the footprint checks (kernel-level tests)
  inputs      seed, contained generators, randn, load_reference
  cases       cpu_config, run_cases_as_script, capture_log
  ranks       multi-rank agreement, tensor parallelism (World, TP_KINDS), mpirun
"""
from .cases import capture_log, cpu_config, run_cases_as_script, run_pytest_file_as_script
from .checks import assert_close, assert_equal, check_layer_outputs, check_nonvacuous, check_output
from .diagnosis import assert_no_divergence, first_divergence, last_progress_ns, nan_note, tiling_warning
from .evidence import Comparison, compare, digest, evidence, say
from .inputs import generator, load_reference, randn, seed
from .keep import failure_dir, keep_failure
from .kernel import (
    KernelRun,
    MPKFootprintError,
    case_params,
    mutated_kernel,
    run_tasks,
    same_bits,
    strided_view,
    worker_block_dim,
)
from .ranks import (
    ONE_RANK,
    TP_KINDS,
    WRONG_SHARD_ENV,
    CaseSkipped,
    World,
    all_ranks_agree,
    as_rank,
    layer_tp,
    mpiexec,
    mpirun,
    on_all_ranks,
    rank_lines,
    script_world,
)
from .scalars import check_scalars
from .tolerances import (
    RMS_LIMIT,
    RMS_MIN_N,
    U32,
    Tolerance,
    e4m3_rounding_bound,
    tol_attention,
    tol_attention_lse,
    tol_attention_merge,
    tol_elementwise,
    tol_fp8_quantized,
    tol_linear,
    tol_normalization,
    tol_peer,
    tol_qk_norm_rope,
    tol_rmsnorm,
    tol_rmsnorm_linear,
    tol_splitk_linear,
    tolerance,
)

__all__ = [
    "run_pytest_file_as_script",
    "KernelRun", "MPKFootprintError", "mutated_kernel", "run_tasks", "case_params", "same_bits",
    "strided_view", "worker_block_dim",
    "capture_log", "cpu_config", "run_cases_as_script", "assert_close", "assert_equal",
    "check_layer_outputs", "check_nonvacuous", "check_output", "assert_no_divergence", "first_divergence",
    "last_progress_ns", "nan_note", "tiling_warning", "Comparison", "compare", "digest", "evidence", "say",
    "generator",
    "load_reference", "keep_failure", "failure_dir",
    "randn", "seed", "ONE_RANK", "TP_KINDS", "WRONG_SHARD_ENV", "CaseSkipped", "World", "all_ranks_agree",
    "as_rank",
    "layer_tp", "mpiexec", "mpirun", "on_all_ranks", "rank_lines", "script_world", "check_scalars",
    "RMS_LIMIT", "RMS_MIN_N", "U32", "Tolerance", "tol_attention", "tol_attention_lse", "tol_attention_merge",
    "tol_peer", "tol_qk_norm_rope", "tol_elementwise",
    "tol_linear", "tol_normalization", "tol_fp8_quantized", "e4m3_rounding_bound",
    "tol_rmsnorm", "tol_rmsnorm_linear", "tol_splitk_linear", "tolerance",
]

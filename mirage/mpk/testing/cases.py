"""A layer test file's cases: the MPK default config of a test-mode run, and the script entry point."""
from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys

from .. import dist
from .evidence import say
from .ranks import TP_KINDS, _on_world, script_world


@contextlib.contextmanager
def capture_log(level: int = logging.INFO):
    """Collect the 'mirage.mpk' logger's messages (cache hits/misses, coarsening) as a list."""
    logger = logging.getLogger("mirage.mpk")
    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    handler, old = Collect(level), logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)



def run_cases_as_script(name: str, run_case, dtypes, cases, jitter=None, extra=(), scalar_cases=(),
                        after=()) -> None:
    """`python test_<layer>_testmode.py`: every (dtype, case), then every scalar case, output in
    ./test_output (or MPK_OUTPUT_DIR); any failure raises, so the script exits non-zero.

    dtypes None: each case starts with its own dtype (run as run_case(*case, ...)).
    scalar_cases: (dtype, case, params) triples, the layer test's SCALAR_CASES, each run as
    run_case(dtype, *case, output_dir=..., scalars_required=True, **params) (check_scalars).
    extra: callables run first with no argument (reference checks that build no kernel).
    after: callables run last as fn(output_dir=..., world=...), each returning its kernel.

    `mpirun -n N python test_<layer>_testmode.py` (script_world): one N-rank job. Every case runs on
    every rank as run_case(..., world=World) with the layer's tensor parallelism (the layer module's
    TP): the test slices its unsharded inputs with world.shard and passes **world.params to
    cpu_config, so rank r writes test_rank{r}.cu / task_graph_rank{r}.json; its checks compare the
    rank's shard with the matching slice of the unsharded reference. After each case World.verify
    gathers every rank's shards and outputs: split dims are smaller on every rank and the ranks'
    slices tile the dim (SHARDED lines), replicated outputs are bit-identical (IDENTICAL lines). A
    failing rank prints its traceback ("[rank r] ...") and MPI_Abort ends the job (never a hang)."""
    out_dir, world = os.environ.get("MPK_OUTPUT_DIR", "./test_output"), script_world(name)
    if world.size > 1:
        say(f"MULTIRANK {name}: {world.size} ranks, tensor parallelism '{world.tp}' {TP_KINDS[world.tp]}")
    for fn in extra:
        fn()
    pairs = [(d, c) for d in dtypes for c in cases] if dtypes else [(c[0], tuple(c[1:])) for c in cases]
    runs = [(f"{name}[{str(d)[6:]},case={c}]", functools.partial(run_case, d, *c, **(
        {"jitter": jitter(d, c)} if jitter else {}))) for d, c in pairs]
    runs += [(f"{name}[{str(d)[6:]},case={c},{p}]", functools.partial(run_case, d, *c, scalars_required=True,
                                                                      **p)) for d, c, p in scalar_cases]
    runs += [(f"{name}:{getattr(fn, 'func', fn).__name__}{getattr(fn, 'keywords', '')}", fn) for fn in after]
    pk = None
    for label, run in runs:
        pk = _on_world(world, label, lambda w: run(output_dir=out_dir, world=w)) or pk
    dist.all_ranks_agree(True, f"All {name} test-mode cases")     # every rank got here
    say(f"generated code and task graph: {pk.output_files[0]}, {pk.output_files[1]}")
    say(f"All {name} test-mode cases PASS")


def run_pytest_file_as_script(test_file: str, args: list[str]) -> None:
    """`python test_<layer>.py [-k EXPR] [pytest options]`: the file's tests through pytest, evidence
    lines shown (-s); exits with pytest's status, so a failure makes the script exit non-zero."""
    import pytest

    sys.exit(pytest.main([test_file, "-s", "-q", "-p", "no:cacheprovider", "--import-mode=importlib", *args]))


def cpu_config(jitter_seed: int | None = 0, **overrides) -> dict:
    """MPK default params for a test-mode run with several workers and (by default) jitter."""
    import mirage

    from ..persistent_kernel import PersistentKernel

    params = PersistentKernel.get_default_init_parameters()
    workers, schedulers = mirage.get_configurations_from_gpu(0)
    params.update(test_mode=True, num_workers=workers, num_local_schedulers=max(2, schedulers))
    params.update(overrides)
    params["schedule_jitter"] = jitter_seed
    return params

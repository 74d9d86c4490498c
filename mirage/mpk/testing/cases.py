"""A layer test file's cases: the MPK default config of a test-mode run, and the script entry point."""
from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import re
import sys

from .. import dist
from .evidence import say
from .keep import case_dirname
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
                        after=(), argv: list[str] | None = None) -> None:
    """`python test_<layer>_testmode.py [-k SUBSTRING] [--list]`: every (dtype, case), then every scalar
    case; each case's files in its own directory, ./test_output/<case label>/ (or under
    MPK_OUTPUT_DIR; the label with brackets, commas and spaces made '_'), cleared of that case's stale
    files first; any failure raises, so the script exits non-zero. -k: only the cases whose label
    contains SUBSTRING; --list: print the labels and run nothing. argv: default sys.argv[1:].

    dtypes None: each case starts with its own dtype (run as run_case(*case, ...)).
    scalar_cases: (dtype, case, params) triples, the layer test's SCALAR_CASES, each run as
    run_case(dtype, *case, output_dir=..., scalars_required=True, **params) (check_scalars).
    extra: callables run first with no argument (reference checks that build no kernel).
    after: callables run last as fn(output_dir=..., world=...), each returning its kernel.

    `mpirun -n N python test_<layer>_testmode.py` (script_world): one N-rank job. Every case runs on
    every rank as run_case(..., world=World) with the layer's tensor parallelism (the layer module's
    TP): the test slices its unsharded inputs with world.shard and passes **world.params to
    cpu_config, so rank r writes test_rank{r}.cu / task_graph_rank{r}.json into the case's directory;
    its checks compare the rank's shard with the matching slice of the unsharded reference. After each
    case World.verify gathers every rank's shards and outputs: split dims are smaller on every rank and
    the ranks' slices tile the dim (SHARDED lines), replicated outputs are bit-identical (IDENTICAL
    lines). A failing rank prints its traceback ("[rank r] ...") and MPI_Abort ends the job."""
    args = _script_args(name, sys.argv[1:] if argv is None else argv)
    out_dir = os.environ.get("MPK_OUTPUT_DIR", "./test_output")
    pairs = [(d, c) for d in dtypes for c in cases] if dtypes else [(c[0], tuple(c[1:])) for c in cases]
    runs = [(f"{name}:{getattr(fn, '__name__', 'check')}", fn, False) for fn in extra]
    runs += [(f"{name}[{str(d)[6:]},case={c}]", functools.partial(run_case, d, *c, **(
        {"jitter": jitter(d, c)} if jitter else {})), True) for d, c in pairs]
    runs += [(f"{name}[{str(d)[6:]},case={c},{p}]", functools.partial(run_case, d, *c, scalars_required=True,
                                                                      **p), True) for d, c, p in scalar_cases]
    runs += [(f"{name}:{getattr(fn, 'func', fn).__name__}{getattr(fn, 'keywords', '')}", fn, True)
             for fn in after]
    if args.list:
        print("\n".join(label for label, _, _ in runs))
        return
    chosen = [r for r in runs if args.k is None or args.k in r[0]]
    if not chosen:
        raise SystemExit(f"{name}: -k {args.k!r} matches none of the {len(runs)} case labels; --list prints "
                         f"them")
    world = script_world(name)
    if world.size > 1:
        say(f"MULTIRANK {name}: {world.size} ranks, tensor parallelism '{world.tp}' {TP_KINDS[world.tp]}")
    pk, dirs = None, []
    for label, run, builds in chosen:
        if not builds:
            run()
            continue
        case_dir = os.path.join(out_dir, case_dirname(label))
        _clear_case_dir(case_dir, world)
        done = _on_world(world, label, lambda w: run(output_dir=case_dir, world=w))   # called at once
        if done is not None:
            pk = done
            dirs.append(case_dir)
    dist.all_ranks_agree(True, f"All {name} test-mode cases")     # every rank got here
    if pk is not None and pk.output_files:
        say(f"generated code and task graph: {pk.output_files[0]}, {pk.output_files[1]}")
    say(f"generated code of the {len(dirs)} case(s): one directory each under {out_dir}/ (e.g. "
        f"{dirs[-1] if dirs else '-'}; python -m mirage.mpk inspect <directory>)")
    say(f"All {name} test-mode cases PASS" if args.k is None else
        f"All {len(chosen)} {name} test-mode case(s) matching -k {args.k!r} PASS")


def _script_args(name: str, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"test_{name}_testmode.py", description=f"The {name} layer's "
                                     f"test-mode cases (testing.run_cases_as_script)")
    parser.add_argument("-k", metavar="SUBSTRING", help="run only the cases whose label contains SUBSTRING")
    parser.add_argument("--list", action="store_true", help="print the case labels and run nothing")
    return parser.parse_args(argv)


_RANK_FILE = re.compile(r"(?:test|task_graph|kernel_metadata|mpk_module)_rank(\d+)\.")


def _clear_case_dir(case_dir: str, world) -> None:
    """Remove the stale files of one case's directory before the case writes it again: each rank its
    own rank's files, rank 0 also those of ranks this job does not have and anything else (no rank
    removes what another rank of this job may already have written: no barrier is needed)."""
    if not os.path.isdir(case_dir):
        return
    for entry in os.listdir(case_dir):
        m = _RANK_FILE.match(entry)
        rank = int(m.group(1)) if m else None
        mine = rank == world.rank or (world.rank == 0 and (rank is None or rank >= world.size))
        path = os.path.join(case_dir, entry)
        if mine and os.path.isfile(path):
            os.remove(path)


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

"""A short soak (benchmarks/soak.py): 100 pk() calls and 20 create/compile/run/finalize cycles leave
RSS, file descriptors and threads where they started."""
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_short_soak_grows_nothing():
    spec = importlib.util.spec_from_file_location("mpk_soak", os.path.join(ROOT, "benchmarks", "soak.py"))
    soak = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(soak)
    problems = soak.soak(launches=100, cycles=20)
    assert not problems, "; ".join(problems)

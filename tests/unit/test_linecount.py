"""mirage/mpk stays within its line budgets (scripts/linecount.py; raising one is a reviewed change): the
core in total, and each layer module (mirage/mpk/layers/<stem>.py) on its own.

The negative controls run the counter on a temporary copy of mirage/mpk: a layer module over its limit
fails naming the file, a long layer module does not count against the core, and core code over the
budget fails. Run: pytest tests/unit/test_linecount.py -s
"""
import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "linecount.py")


def _load_linecount():
    spec = importlib.util.spec_from_file_location("linecount", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


linecount = _load_linecount()


def test_mirage_mpk_within_line_budget():
    proc = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True)
    print(proc.stdout.splitlines()[-1])
    assert proc.returncode == 0, proc.stdout
    assert "core total (budget" in proc.stdout, proc.stdout
    assert "layer modules (mirage/mpk/layers/<stem>.py)" in proc.stdout, proc.stdout


def doc_limit_problems(doc: str, limits: dict[str, int]) -> list[str]:
    """The limits the "Line budget" section of `doc` does not state as `NAME` (value)."""
    section = doc.split("## Line budget", 1)[1] if "## Line budget" in doc else ""
    return [f"`{name}` ({value}) expected" for name, value in limits.items()
            if f"`{name}` ({value})" not in section]


def test_architecture_doc_states_the_limits_in_force():
    """docs/architecture.md's "Line budget" names both limits with the values the counter enforces (it said
    5215 while BUDGET was 5250)."""
    with open(os.path.join(ROOT, "docs", "architecture.md")) as f:
        limits = {"BUDGET": linecount.BUDGET, "LAYER_LIMIT": linecount.LAYER_LIMIT}
        problems = doc_limit_problems(f.read(), limits)
    assert not problems, f"docs/architecture.md, Line budget: {problems}"


def test_doc_limit_check_has_teeth():
    """Negative control: a stale value, and a value stated outside the section, are both caught."""
    doc = "## Line budget\n- `BUDGET` (5215); `LAYER_LIMIT` (150)\n"
    assert doc_limit_problems(doc, {"BUDGET": 5250, "LAYER_LIMIT": 150}) == ["`BUDGET` (5250) expected"]
    stated_before = "`BUDGET` (5250)\n## Line budget\n"
    assert doc_limit_problems(stated_before, {"BUDGET": 5250}) == ["`BUDGET` (5250) expected"]
    assert doc_limit_problems(doc, {"BUDGET": 5215, "LAYER_LIMIT": 150}) == []


@pytest.fixture
def package_copy(tmp_path):
    dst = tmp_path / "mpk"
    shutil.copytree(os.path.join(ROOT, "mirage", "mpk"), dst, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def code_file(lines: int) -> str:
    return "".join(f"x{i} = {i}\n" for i in range(lines))


def core_total(root) -> int:
    lines, _ = linecount.report(str(root))
    return int(next(x for x in lines if "core total" in x).split()[0])


def test_a_layer_module_over_its_limit_fails(package_copy):
    """Negative control: one line over LAYER_LIMIT fails and names the file; at the limit it passes."""
    layer = package_copy / "layers" / "toolong.py"
    layer.write_text(code_file(linecount.LAYER_LIMIT))
    budget = core_total(package_copy)
    assert linecount.report(str(package_copy), budget=budget)[1]
    layer.write_text(code_file(linecount.LAYER_LIMIT + 1))
    lines, ok = linecount.report(str(package_copy), budget=budget)
    assert not ok and any(x.startswith("FAIL mpk/layers/toolong.py: 151 code lines") for x in lines), lines
    proc = subprocess.run([sys.executable, SCRIPT, str(package_copy)], capture_output=True, text=True)
    assert proc.returncode == 1 and "FAIL mpk/layers/toolong.py" in proc.stdout, proc.stdout
    print(f"LINECOUNT negative control: a {linecount.LAYER_LIMIT + 1}-line layer module fails PASS")


def test_layer_modules_do_not_count_against_the_core(package_copy):
    """A layer module adds nothing to the core total; the same code as a core module or a layers/ helper
    does (so code cannot leave the core budget by moving into layers/ under a helper's name)."""
    before = core_total(package_copy)
    (package_copy / "layers" / "newlayer.py").write_text(code_file(100))
    assert core_total(package_copy) == before
    (package_copy / "layers" / "_helper.py").write_text(code_file(100))
    assert core_total(package_copy) == before + 100


def test_core_over_budget_fails(package_copy):
    """Negative control: core code one line over the budget fails."""
    budget = core_total(package_copy)
    (package_copy / "extra.py").write_text(code_file(1))
    lines, ok = linecount.report(str(package_copy), budget=budget)
    assert not ok and any(x.startswith("FAIL core:") and "over the budget" in x for x in lines), lines

"""Lines of code per file under mirage/mpk (no blank lines, comments or docstrings); fails over budget.

Two limits (docs/architecture.md, Line budget):
- the core, every .py file under mirage/mpk except the layer modules, within BUDGET in total;
- each layer module, mirage/mpk/layers/<stem>.py, within LAYER_LIMIT on its own. A new layer adds a
  module, so the layers cannot share one total with the core: each must fit one screen instead.
  layers/__init__.py and _-prefixed helpers (layers/_elementwise.py) are shared code: core.
Raising BUDGET or LAYER_LIMIT is a reviewed change. Run: python scripts/linecount.py [mirage/mpk dir]
"""
from __future__ import annotations

import io
import os
import sys
import tokenize

BUDGET = 5250
LAYER_LIMIT = 150
ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "mirage", "mpk")


def code_lines(path: str) -> int:
    """Lines holding a token other than a comment, a docstring or a newline."""
    with open(path, "rb") as f:
        tokens = list(tokenize.tokenize(io.BytesIO(f.read()).readline))
    lines, prev = set(), None
    for tok in tokens:
        skip = tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                            tokenize.DEDENT, tokenize.ENCODING, tokenize.ENDMARKER)
        docstring = tok.type == tokenize.STRING and (prev is None or prev.type in (
            tokenize.INDENT, tokenize.NEWLINE, tokenize.DEDENT, tokenize.ENCODING))
        if not skip and not docstring:
            lines.update(range(tok.start[0], tok.end[0] + 1))
        if tok.type not in (tokenize.COMMENT, tokenize.NL):
            prev = tok
    return len(lines)


def is_layer_module(rel: str) -> bool:
    """rel (relative to mirage/mpk): layers/<stem>.py of one layer, not the package or a helper."""
    parts = rel.replace(os.sep, "/").split("/")
    return len(parts) == 2 and parts[0] == "layers" and not parts[1].startswith("_")


def report(root: str = ROOT, budget: int = BUDGET, layer_limit: int = LAYER_LIMIT) -> tuple[list[str], bool]:
    """The lines to print (core files and total, then the layer modules) and whether both limits hold."""
    core, layer_modules = [], []
    for dirpath, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            shown = os.path.relpath(path, os.path.dirname(root))
            (layer_modules if is_layer_module(rel) else core).append((code_lines(path), shown))
    total = sum(n for n, _ in core)
    lines = [f"{n:6d}  {shown}" for n, shown in core]
    lines.append(f"{total:6d}  core total (budget {budget}; layer modules not included)")
    lines.append(f"layer modules (mirage/mpk/layers/<stem>.py), at most {layer_limit} code lines each:")
    lines += [f"{n:6d}  {shown}" for n, shown in layer_modules]
    over = [(n, shown) for n, shown in layer_modules if n > layer_limit]
    lines += [f"FAIL {shown}: {n} code lines, more than the {layer_limit} a layer module may have; move what "
              f"layers share into layers/__init__.py or a layers/_<helper>.py (core)" for n, shown in over]
    if total > budget:
        lines.append(f"FAIL core: {total} code lines, over the budget of {budget} by {total - budget}; new "
                     f"code is expected to fit or replace code (raising BUDGET is a reviewed change)")
    ok = total <= budget and not over
    largest = max((n for n, _ in layer_modules), default=0)
    lines.append(f"core {total}/{budget}, {len(layer_modules)} layer modules, largest "
                 f"{largest}/{layer_limit} {'PASS' if ok else 'FAIL'}")
    return lines, ok


def main(argv: list[str]) -> int:
    lines, ok = report(argv[0] if argv else ROOT)
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

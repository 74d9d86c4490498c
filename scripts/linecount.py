"""Lines of code per file under mirage/mpk (no blank lines, comments or docstrings); fails over budget.

Raising BUDGET is a reviewed change (docs/architecture.md, Line budget). Run: python scripts/linecount.py
"""
import io
import os
import sys
import tokenize

BUDGET = 3300
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


def main() -> int:
    total = 0
    for root, _, files in sorted(os.walk(ROOT)):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(root, name)
                n = code_lines(path)
                total += n
                print(f"{n:6d}  {os.path.relpath(path, os.path.dirname(ROOT))}")
    print(f"{total:6d}  total (budget {BUDGET})")
    return 0 if total <= BUDGET else 1


if __name__ == "__main__":
    sys.exit(main())

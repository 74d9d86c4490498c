"""mirage/mpk stays within its line budget (scripts/linecount.py; raising it is a reviewed change)."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_mirage_mpk_within_line_budget():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "linecount.py")],
                          capture_output=True, text=True)
    print(proc.stdout.splitlines()[-1])
    assert proc.returncode == 0, proc.stdout

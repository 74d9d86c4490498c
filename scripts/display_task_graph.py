"""Write <json>.dot (tasks clustered by layer; layers only past 2000 tasks) and, where
Graphviz's `dot` is installed, <json>.svg.

Run: python scripts/display_task_graph.py test_output/task_graph_rank0.json
"""
import shutil
import subprocess
import sys

from mirage.mpk import inspect

if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    src = sys.argv[1]
    base = src[:-5] if src.endswith(".json") else src
    try:
        g = inspect.load(src)
    except (OSError, inspect.NotATaskGraph) as e:
        sys.exit(f"display_task_graph: {e}")
    with open(f"{base}.dot", "w") as f:
        f.write(inspect.to_dot(g))
    print(f"wrote {base}.dot")
    if shutil.which("dot"):
        subprocess.run(["dot", "-Tsvg", f"{base}.dot", "-o", f"{base}.svg"], check=True)
        print(f"wrote {base}.svg")
    else:
        print("Graphviz 'dot' not found: no .svg (apt-get install graphviz)")

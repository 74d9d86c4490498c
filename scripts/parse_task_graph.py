"""Summarize a task_graph_rank{R}.json: tasks per layer, event fan-in/out, critical path.

Run: python scripts/parse_task_graph.py test_output/task_graph_rank0.json
"""
import sys

from mirage.mpk import inspect

if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    try:
        g = inspect.load(sys.argv[1])
    except (OSError, inspect.NotATaskGraph) as e:
        sys.exit(f"parse_task_graph: {e}")
    print(inspect.summary(g, sys.argv[1]))

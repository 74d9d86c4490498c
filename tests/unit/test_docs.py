"""The repository documents itself: citations point inside it, and docs/ cannot drift from the code.

(a) no tracked file outside docs/ cites the design notes that live outside the repository;
(b) every docs/<name>.md a tracked file mentions (and every .md link inside docs/) exists;
(c) every key the code writes into task_graph_rank0.json and kernel_metadata_rank0.json is named,
    in backticks, in docs/task_graph_json.md;
(d) every layer module's task type is in that file's task-type table.
"""
import json
import os
import pkgutil
import re
import shutil
import subprocess

import pytest
import torch

from mirage.mpk import layers
from mirage.mpk.persistent_kernel import PersistentKernel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = os.path.join(ROOT, "docs")
JSON_DOC = os.path.join(DOCS, "task_graph_json.md")

# Citations of notes outside the repository. Built from pieces so that this file does not match.
OUTSIDE = re.compile("|".join([
    r"\bDESIGN\b",                  # the design notes' name, any section number or none
    "MPK_" + "FACTS",
    "STYLE" + r"\.md",
    "CUDA_" + "NOTES",
    r"\.\./" + "shared",
]))
DOC_PATH = re.compile(r"(?<![\w/.-])docs/([\w.-]+\.md)")
MD_LINK = re.compile(r"\]\(([\w.-]+\.md)(?:#[^)]*)?\)")


def tracked_files() -> list[str]:
    if shutil.which("git") is None or not os.path.isdir(os.path.join(ROOT, ".git")):
        pytest.skip("not a git checkout (git ls-files is needed to know the tracked files)")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p]


def text_lines(rel: str) -> list[str]:
    path = os.path.join(ROOT, rel)
    if not os.path.isfile(path):            # tracked but deleted in the working tree
        return []
    with open(path, "rb") as f:
        raw = f.read()
    if b"\0" in raw[:8192]:                 # binary
        return []
    return raw.decode("utf-8", errors="replace").splitlines()


def test_no_citation_of_notes_outside_the_repository():
    offenders = [f"{rel}:{n}: {line.strip()}"
                 for rel in tracked_files() if not rel.startswith("docs/")
                 for n, line in enumerate(text_lines(rel), 1) if OUTSIDE.search(line)]
    assert not offenders, ("these lines cite notes that are not in the repository; cite the matching "
                           "docs/*.md file instead (docs/README.md lists them):\n  " + "\n  ".join(offenders))


def test_every_cited_docs_file_exists():
    files = set(tracked_files()) | {f"docs/{n}" for n in os.listdir(DOCS) if n.endswith(".md")}
    missing = []
    for rel in sorted(files):
        for n, line in enumerate(text_lines(rel), 1):
            names = DOC_PATH.findall(line)
            if rel.startswith("docs/"):
                names += MD_LINK.findall(line)
            missing += [f"{rel}:{n}: docs/{name}" for name in names
                        if not os.path.isfile(os.path.join(DOCS, name))]
    assert not missing, "cited documentation files that do not exist:\n  " + "\n  ".join(missing)


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[dict, dict]:
    """task_graph_rank0.json and kernel_metadata_rank0.json of a small real graph with a dependency."""
    out = tmp_path_factory.mktemp("docjson")
    pk = PersistentKernel(test_mode=True, num_workers=2, num_local_schedulers=1)
    x = pk.attach_input(torch.randn(4, 8), name="x")
    w = pk.attach_input(torch.randn(8), name="w")
    h = pk.new_tensor((4, 8), dtype=torch.float32, name="h")
    y = pk.attach_input(torch.zeros(4, 8), name="y")
    pk.rmsnorm_layer(x, w, h, (2, 1, 1), (128, 1, 1))
    pk.rmsnorm_layer(h, w, y, (1, 1, 1), (128, 1, 1))
    pk.compile(output_dir=str(out))
    pk.finalize()
    with open(out / "task_graph_rank0.json") as f:
        graph = json.load(f)
    with open(out / "kernel_metadata_rank0.json") as f:
        meta = json.load(f)
    return graph, meta


def json_keys(graph: dict, meta: dict) -> set[str]:
    keys = set(graph)
    for task in graph["all_tasks"]:
        keys |= set(task)
        for tile in task["inputs"] + task["outputs"]:
            keys |= set(tile)
    for event in graph["all_events"]:
        keys |= set(event)
    for layer in graph["layers"]:
        keys |= set(layer)
    keys |= set(meta)
    for tensor in meta["tensors"].values():
        keys |= set(tensor)
    for layer in meta["layers"]:
        keys |= set(layer)
    return keys


def test_every_json_key_is_documented(written):
    graph, meta = written
    assert any(e["kind"] == "launch" for e in graph["all_events"]), "the graph must have a launch event"
    with open(JSON_DOC) as f:
        doc = f.read()
    missing = sorted(k for k in json_keys(graph, meta) if f"`{k}`" not in doc)
    assert not missing, f"keys written by the code but not named (in backticks) in {JSON_DOC}: {missing}"


def test_every_task_type_is_in_the_table():
    with open(JSON_DOC) as f:
        doc = f.read()
    section = doc.split("### Task types", 1)[1].split("\n#", 1)[0]
    rows = dict(re.findall(r"^\|\s*`(\w+)`\s*\|\s*(\d+)\s*\|", section, re.M))
    stems = sorted(m.name for m in pkgutil.iter_modules(layers.__path__) if not m.name.startswith("_"))
    assert stems, "no layer modules found"
    wrong = [f"{s}: code {layers.task_type_of(s)}, table {rows.get(s, 'missing')}" for s in stems
             if rows.get(s) != str(layers.task_type_of(s))]
    assert not wrong, f"task types in {JSON_DOC} differ from the layer modules: {wrong}"
    assert re.search(r"^\|\s*TERMINATE[^|]*\|\s*0\s*\|", section, re.M), "TERMINATE (0) is not in the table"

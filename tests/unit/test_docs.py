"""The repository documents itself: citations point inside it, and docs/ cannot drift from the code.

(a) no tracked file outside docs/ cites the design notes that live outside the repository;
(b) every docs/<name>.md a tracked file mentions (and every .md link inside docs/) exists;
(c) every key the code writes into task_graph_rank0.json and kernel_metadata_rank0.json is named,
    in backticks, in docs/task_graph_json.md;
(d) every row of that file's task-type table matches its layer module's TASK_TYPE, and the file
    states the extension range. A layer missing from the table is not an error: a new layer edits no
    shared table (README "How to add a layer"); its module is the authority;
(e) docs/architecture.md's environment-variable table lists exactly the MPK_* variables the code reads
    (every such name a Python file spells as a string, every getenv of the C++, every $MPK_ of a shell
    script), and the README's table only names from it;
(f) its import table is the import graph of mirage/mpk (module level and inside functions), which has
    no cycle.
"""
import ast
import json
import os
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
    if shutil.which("git") is None or not os.path.exists(os.path.join(ROOT, ".git")):
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


def task_table_problems(doc: str, types: dict[str, int]) -> list[str]:
    """What the "### Task types" table of `doc` gets wrong about the layer modules' `types`: a row with
    another number than its module, or a row for a kind that has no module. Absent kinds are fine."""
    section = doc.split("### Task types", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\|\s*`(\w+)`\s*\|\s*(\d+)\s*\|", section, re.M)
    problems = [f"row `{kind}` {n}: no module mirage/mpk/layers/{kind}.py" if kind not in types else
                f"row `{kind}` {n}: layers/{kind}.py has TASK_TYPE = {types[kind]}"
                for kind, n in rows if types.get(kind) != int(n)]
    if not rows:
        problems.append("no `kind` | number rows")
    if not re.search(r"^\|\s*TERMINATE[^|]*\|\s*0\s*\|", section, re.M):
        problems.append("TERMINATE (0) is not in the table")
    return problems


def test_task_type_table_agrees_with_the_layer_modules():
    with open(JSON_DOC) as f:
        doc = f.read()
    types = {stem: layers.task_type_of(stem) for stem in layers.layer_stems()}
    assert types, "no layer modules found"
    problems = task_table_problems(doc, types)
    assert not problems, f"the task-type table of {JSON_DOC} disagrees with the layer modules: {problems}"
    lo, hi = layers.EXTENSION_TASK_TYPES.start, layers.EXTENSION_TASK_TYPES.stop - 1
    assert f"{lo}-{hi}" in doc, f"{JSON_DOC} must state the extension range {lo}-{hi} (layers/__init__.py)"


def test_task_type_table_check_has_teeth():
    """Negative control: a wrong number and a row for a kind with no module are caught; a kind the table
    leaves out (a new layer) is not."""
    doc = ("### Task types\n\n| kind | `task_type` |\n|---|---|\n| TERMINATE (task 0) | 0 |\n"
           "| `rmsnorm` | 119 |\n")
    assert task_table_problems(doc, {"rmsnorm": 119, "layernorm": 1000}) == []
    assert task_table_problems(doc, {"rmsnorm": 120}) == [
        "row `rmsnorm` 119: layers/rmsnorm.py has TASK_TYPE = 120"]
    assert task_table_problems(doc + "| `gone` | 7 |\n", {"rmsnorm": 119}) == [
        "row `gone` 7: no module mirage/mpk/layers/gone.py"]
    assert task_table_problems(doc.replace("| TERMINATE (task 0) | 0 |\n", ""), {"rmsnorm": 119}) == [
        "TERMINATE (0) is not in the table"]


# ---- (e) the environment variables
ENV_NAME = re.compile(r"MPK_[A-Z0-9_]+")
ARCH_DOC = os.path.join(DOCS, "architecture.md")


def env_names_read(files: dict[str, str]) -> dict[str, str]:
    """{MPK_* variable: the first file that reads it} over `files` ({path: text}): in Python every string
    constant that is such a name (each one the library, scripts, tests and benchmarks spell is a variable:
    os.environ, monkeypatch.setenv, a child's env), in C / C++ its getenv, in shell its $NAME / ${NAME}.
    Compile-time macros (-DMPK_TEST_MODE) are neither: a flag string is not the bare name."""
    found: dict[str, str] = {}
    for path, text in sorted(files.items()):
        if path.endswith(".py"):
            constants = (n.value for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Constant))
            names = [c for c in constants if isinstance(c, str) and ENV_NAME.fullmatch(c)]
        elif path.endswith(".sh"):
            names = re.findall(r"\$\{?(MPK_[A-Z0-9_]+)", text)
        else:
            names = re.findall(r"getenv\(\s*\"(MPK_[A-Z0-9_]+)\"", text)
        for name in names:
            found.setdefault(name, path)
    return found


def env_table(doc: str, heading: str) -> set[str]:
    """The backticked MPK_* names in the first column of the table under `heading`."""
    section = doc.split(heading, 1)[1].split("\n#", 1)[0]
    cells = re.findall(r"^\|([^|]*)\|", section, re.M)
    return {name for cell in cells for name in re.findall(r"`(MPK_[A-Z0-9_]+)`", cell)}


def env_table_problems(read: dict[str, str], table: set[str], readme: set[str]) -> list[str]:
    """What the tables get wrong: a variable read but not listed, a row nothing reads, a README row that
    docs/architecture.md's table lacks."""
    return ([f"{name} is read ({path}) but not in the table of docs/architecture.md"
             for name, path in sorted(read.items()) if name not in table] +
            [f"{name}: a row of docs/architecture.md's table, but nothing reads it"
             for name in sorted(table - set(read))] +
            [f"{name}: a row of README's table, not of docs/architecture.md's"
             for name in sorted(readme - table)])


def test_environment_table_lists_every_variable_the_code_reads():
    this = os.path.relpath(os.path.abspath(__file__), ROOT)      # its control's names are not variables
    files = {rel: "\n".join(text_lines(rel)) for rel in tracked_files()
             if rel.split("/")[0] in ("mirage", "csrc", "scripts", "tests", "benchmarks", ".ci")
             and rel.endswith((".py", ".sh", ".h", ".cuh", ".cpp", ".cu")) and rel != this}
    read = env_names_read(files)
    assert len(read) >= 20 and "MPK_CACHE_DIR" in read and "MPK_SIMT_SERIAL" in read, read
    with open(ARCH_DOC) as f:
        table = env_table(f.read(), "## Environment variables")
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = env_table(f.read(), "## Environment knobs")
    problems = env_table_problems(read, table, readme)
    print(f"ENV {len(read)} variables read, {len(table)} in docs/architecture.md's table, {len(readme)} in "
          f"the README's: {'PASS' if not problems else 'FAIL'}")
    assert not problems, "\n".join(problems)


def test_environment_table_check_has_teeth():
    """Negative control: a variable read nowhere in the table, a row nobody reads and a README row the
    table lacks are each named; a flag string, a getenv of another prefix and the table's own names pass."""
    files = {"mirage/a.py": 'import os\nos.environ.get("MPK_NEW")\nflags = ["-DMPK_TEST_MODE"]\n',
             "csrc/b.h": 'const char* s = getenv("MPK_SERIAL"); const char* h = getenv("HOME");\n',
             "scripts/c.sh": 'echo "${MPK_OUT:-x}" $MPK_CC\n'}
    read = env_names_read(files)
    assert read == {"MPK_NEW": "mirage/a.py", "MPK_SERIAL": "csrc/b.h", "MPK_OUT": "scripts/c.sh",
                    "MPK_CC": "scripts/c.sh"}, read
    doc = ("## Environment variables\n\n| variable | meaning |\n|---|---|\n"
           "| `MPK_SERIAL`, `MPK_OUT` | x `MPK_NOTE` |\n| `MPK_CC` | y |\n| `MPK_GONE` | z |\n\n"
           "## Next\n| `MPK_NEW` | not this table |\n")
    table = env_table(doc, "## Environment variables")
    assert table == {"MPK_SERIAL", "MPK_OUT", "MPK_CC", "MPK_GONE"}, table
    assert env_table_problems(read, table, {"MPK_CC", "MPK_OLD"}) == [
        "MPK_NEW is read (mirage/a.py) but not in the table of docs/architecture.md",
        "MPK_GONE: a row of docs/architecture.md's table, but nothing reads it",
        "MPK_OLD: a row of README's table, not of docs/architecture.md's"]


# ---- (f) the import graph
PACKAGE = os.path.join(ROOT, "mirage", "mpk")
SUBPACKAGES = ("layers", "testing", "models")     # one node each


def node_of(module: str) -> str:
    """The import table's row of a module of mirage.mpk (dotted, relative to it): a subpackage is one."""
    head = module.split(".")[0]
    return head if head in SUBPACKAGES else module


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """{row: the rows it imports} from {module (dotted, relative to mirage.mpk; a package's __init__ is the
    package): its source}, every import statement counted wherever it is (a function's too)."""
    graph: dict[str, set[str]] = {node_of(m): set() for m in sources}
    for module, text in sources.items():
        package = module if module in SUBPACKAGES or module == "__init__" else module.rpartition(".")[0]
        package = "" if package == "__init__" else package
        for n in ast.walk(ast.parse(text)):
            if isinstance(n, ast.ImportFrom) and (n.level or (n.module or "").startswith("mirage.mpk")):
                if n.level:
                    base = package.split(".") if package else []
                    base = base[:len(base) - (n.level - 1)] + (n.module.split(".") if n.module else [])
                    base = ".".join(base)
                else:
                    base = n.module[len("mirage.mpk"):].lstrip(".")
                # each name: a module of its own (from . import graph), else one of `base`'s names
                named = [f"{base}.{a.name}".lstrip(".") for a in n.names]
                found = [name if name in sources else base for name in named]
            elif isinstance(n, ast.Import):
                found = [a.name[len("mirage.mpk."):] for a in n.names if a.name.startswith("mirage.mpk.")]
            else:
                continue
            graph[node_of(module)] |= {node_of(t) for t in found
                                       if t in sources and node_of(t) != node_of(module)}
    return graph


def import_table(doc: str) -> dict[str, set[str]]:
    """docs/architecture.md's `| `module` | `a`, `b` |` rows (a '-' for none)."""
    rows = re.findall(r"^\|\s*`(\w+)`\s*\|\s*([^|]*?)\s*\|\s*$", doc.split("## Dependency direction", 1)[1]
                      .split("\n## ", 1)[0], re.M)
    return {m: set(re.findall(r"`(\w+)`", deps)) for m, deps in rows}


def cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of `graph` (its rows in order, the first repeated at the end), or []."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state and (found := visit(dep)):
                return found
        state[node] = 2
        path.pop()
        return []
    return next((c for node in sorted(graph) if node not in state and (c := visit(node))), [])


def import_problems(graph: dict[str, set[str]], table: dict[str, set[str]]) -> list[str]:
    """What the table gets wrong about `graph` (a row unlike the code's imports, a row for no module), and a
    cycle of the graph."""
    problems = [f"{m}: the table says {sorted(table.get(m, ())) or '-'}, "
                f"the code imports {sorted(deps) or '-'}"
                for m, deps in sorted(graph.items()) if table.get(m) != deps]
    problems += [f"{m}: a row of the table, but no such module" for m in sorted(set(table) - set(graph))]
    if (found := cycle(graph)):
        problems.append("an import cycle: " + " -> ".join(found))
    return problems


def package_sources() -> dict[str, str]:
    sources = {}
    for root, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py") and "csrc" not in os.path.relpath(root, PACKAGE).split(os.sep):
                rel = os.path.relpath(os.path.join(root, name), PACKAGE)[:-3].replace(os.sep, ".")
                module = rel[:-len(".__init__")] if rel.endswith(".__init__") else rel
                with open(os.path.join(root, name)) as f:
                    sources[module] = f.read()
    return sources


def test_import_table_is_the_import_graph():
    graph = import_graph(package_sources())
    with open(ARCH_DOC) as f:
        table = import_table(f.read())
    problems = import_problems(graph, table)
    print(f"IMPORTS {len(graph)} modules of mirage.mpk, {sum(map(len, graph.values()))} imports, "
          f"{len(table)} rows in docs/architecture.md: {'PASS' if not problems else 'FAIL'}")
    assert len(graph) >= 25 and graph["build"] == {"errors"}, graph
    assert not problems, "\n".join(problems)


def test_import_table_check_has_teeth():
    """Negative control: an import the table lacks, a row for a module that is gone and a cycle are named;
    relative, absolute and in-function imports all count, imports inside a subpackage do not."""
    sources = {"build": "from .errors import MPKError\n", "errors": "",
               "graph": "def f():\n    from mirage.mpk import build\n",
               "testing": "from . import cases\n",
               "testing.cases": "from ..graph import f\nfrom . import keep\n",
               "testing.keep": "import mirage.mpk.errors\n"}
    graph = import_graph(sources)
    assert graph == {"build": {"errors"}, "errors": set(), "graph": {"build"},
                     "testing": {"graph", "errors"}}, graph
    table = {"build": {"errors"}, "errors": set(), "graph": set(), "testing": {"graph", "errors"},
             "gone": set()}
    assert import_problems(graph, table) == ["graph: the table says -, the code imports ['build']",
                                             "gone: a row of the table, but no such module"]
    graph["errors"] = {"graph"}
    assert cycle(graph) == ["build", "errors", "graph", "build"]
    assert import_problems(graph, {**table, "graph": {"build"}, "errors": {"graph"}})[-1] == \
        "an import cycle: build -> errors -> graph -> build"
    doc = ("## Dependency direction\n\n| module | imports |\n|---|---|\n| `build` | `errors` |\n"
           "| `errors` | - |\n\n## Data model\n| `x` | `y` |\n")
    assert import_table(doc) == {"build": {"errors"}, "errors": set()}

import os
import shutil

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = "csrc"                          # the one copy in the repository
CSRC_PACKAGE_DIR = ("mirage", "mpk", "csrc")   # where a wheel carries it (mirage.mpk.build.PACKAGED_CSRC)
CSRC_SUFFIXES = (".h", ".cuh")         # what a generated module includes; nothing else is needed


def csrc_files() -> list[str]:
    """The kernel headers under csrc/, relative to it, sorted."""
    found = []
    for root, dirs, files in os.walk(os.path.join(HERE, CSRC)):
        dirs.sort()
        found += [os.path.relpath(os.path.join(root, f), os.path.join(HERE, CSRC))
                  for f in sorted(files) if f.endswith(CSRC_SUFFIXES)]
    return found


class build_py_with_csrc(build_py):
    """build_py that also copies the csrc/ headers into the built package as mirage/mpk/csrc."""

    # csrc/ stays the single source in git; wheels and `pip install .` need it inside the package
    # because the checkout is gone after installing. An editable install finds the checkout's
    # csrc/ itself (mirage.mpk.build.csrc_dir), so nothing is copied for it.

    def _csrc_mapping(self) -> dict[str, str]:
        dest = os.path.join(self.build_lib, *CSRC_PACKAGE_DIR)
        return {os.path.join(dest, rel): os.path.join(HERE, CSRC, rel) for rel in csrc_files()}

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        mapping = self._csrc_mapping()
        if not any(t.endswith(os.path.join("runtime", "runtime.h")) for t in mapping):
            # e.g. an sdist made without MANIFEST.in: a wheel without kernels would only fail at compile
            raise RuntimeError(f"{os.path.join(HERE, CSRC)} has no runtime/runtime.h: the kernel sources "
                               f"are missing from this source tree")
        # A header deleted from csrc/ must not survive in a reused build/ directory: rebuild the tree.
        dest = os.path.join(self.build_lib, *CSRC_PACKAGE_DIR)
        if os.path.isdir(dest) and not self.dry_run:
            shutil.rmtree(dest)
        for target, source in mapping.items():
            self.mkpath(os.path.dirname(target))
            self.copy_file(source, target)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = list(super().get_outputs(include_bytecode))
        return outputs + [t for t in self._csrc_mapping() if t not in outputs]

    def get_output_mapping(self) -> dict[str, str]:
        # setuptools >= 64; a strict editable install links these files instead of copying them.
        mapping = dict(super().get_output_mapping())
        mapping.update(self._csrc_mapping())
        return dict(sorted(mapping.items()))


setup(
    name="mirage-mpk",
    version="0.1.0",
    description="Persistent-kernel (megakernel) test-mode runner, API-compatible with Mirage MPK",
    packages=find_packages(include=["mirage", "mirage.*"]),
    cmdclass={"build_py": build_py_with_csrc},
    python_requires=">=3.10",
    # Any recent torch: GPU machines keep their own build. README/.ci pin torch==2.13.0 (CPU).
    # numpy: torch warns "Failed to initialize NumPy" on every import without it; the task table's rows.
    # orjson: task_graph_rank{R}.json of a 100k-task graph in a tenth of a second (mirage/mpk/codegen.py).
    install_requires=["torch>=2.1", "filelock>=3.0", "numpy>=1.22", "orjson>=3.6"],
    # mpi: multi-rank runs and tests (world_size > 1); MPICH's wheel brings mpiexec, no root needed
    # profile: the profiler's Perfetto protobuf trace (profile=True / profiler_tensor). perfetto 0.59.1's
    # protos are protobuf 6.31.1 gencode, which an older runtime refuses; 7.x reads them.
    extras_require={"test": ["pytest>=7", "pytest-xdist>=3", "ruff"], "mpi": ["mpi4py>=4", "mpich"],
                    "profile": ["perfetto==0.59.1", "protobuf>=6.31.1,<8"],
                    # Hugging Face transformers: the model tests' independent reference (mirage.mpk.models)
                    "models": ["transformers"]},
)

from setuptools import find_packages, setup

setup(
    name="mirage-mpk",
    version="0.1.0",
    description="Persistent-kernel (megakernel) test-mode runner, API-compatible with Mirage MPK",
    packages=find_packages(include=["mirage", "mirage.*"]),
    python_requires=">=3.10",
    # Any recent torch: GPU machines keep their own build. README/.ci pin torch==2.13.0 (CPU).
    install_requires=["torch>=2.1", "filelock>=3.0"],
    # mpi: multi-rank runs and tests (world_size > 1); MPICH's wheel brings mpiexec, no root needed
    extras_require={"test": ["pytest>=7", "ruff"], "mpi": ["mpi4py>=4", "mpich"]},
)

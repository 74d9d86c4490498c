"""Test inputs: the seed, contained generators, random tensors, and the folder's pytorch_reference.py."""
from __future__ import annotations

import importlib.util
import os
import sys

import torch

from ..dtypes import float32, to_dtype

# ---- inputs --------------------------------------------------------------------------------

def seed(default: int = 0) -> int:
    """The test seed: MPK_SEED if set, else `default` (printed in every failure message)."""
    return int(os.environ.get("MPK_SEED", default))


def generator(offset: int = 0) -> torch.Generator:
    """A contained CPU generator (never the global RNG), seeded from MPK_SEED + offset."""
    g = torch.Generator(device="cpu")
    g.manual_seed(seed() + offset)
    return g


def randn(shape, dtype=float32, gen: torch.Generator | None = None, scale: float = 1.0) -> torch.Tensor:
    # drawn on the CPU generator, then moved: the same numbers on every backend (torch's default device)
    x = torch.randn(*shape, generator=gen or generator(), dtype=torch.float32, device="cpu") * scale
    return x.to(device=torch.get_default_device(), dtype=to_dtype(dtype).torch)


def load_reference(test_file: str, name: str = "pytorch_reference"):
    """Load `<folder of test_file>/pytorch_reference.py` under a unique name (folders never collide)."""
    folder = os.path.dirname(os.path.abspath(test_file))
    path = os.path.join(folder, f"{name}.py")
    unique = f"_mpk_ref_{os.path.basename(folder)}_{abs(hash(path)) & 0xFFFFFF:06x}"
    if unique in sys.modules:
        return sys.modules[unique]
    spec = importlib.util.spec_from_file_location(unique, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[unique] = module
    spec.loader.exec_module(module)
    return module

"""mirage: a persistent-kernel (megakernel) test-mode runner, API-compatible with Mirage MPK."""
from __future__ import annotations

import os

from .mpk.dtypes import bfloat16, float8_e4m3, float16, float32, int32, int64, uint32

__version__ = "0.1.0"
__all__ = ["get_configurations_from_gpu", "bfloat16", "float16", "float32", "float8_e4m3", "int32", "int64",
           "uint32", "__version__"]


def get_configurations_from_gpu(rank: int = 0) -> tuple[int, int]:
    """(num_workers, num_schedulers) for the GPU of `rank`, or a CPU pair when there is no GPU.

    GPU: workers = 144 if SMs >= 160, 128 if >= 132, 96 if >= 108, 64 if >= 68, 30 if >= 40,
    else 20; schedulers = 4 x (SMs - workers). CPU: at least 3 workers (so tests exercise
    concurrency even on 2 cores) and one scheduler.
    """
    import torch

    if not torch.cuda.is_available():
        return max(3, min(8, os.cpu_count() or 1)), 1
    sms = torch.cuda.get_device_properties(rank % torch.cuda.device_count()).multi_processor_count
    return configuration_for_sms(sms, rank)


def configuration_for_sms(sms: int, rank: int = 0) -> tuple[int, int]:
    """MPK's (num_workers, num_schedulers) for a GPU of `sms` SMs (the table above), also what
    tests/unit/test_launch_plan.py holds against each architecture's launch limits."""
    for limit, workers in ((160, 144), (132, 128), (108, 96), (68, 64), (40, 30), (0, 20)):
        if sms >= limit:
            break
    if sms <= workers:
        raise RuntimeError(f"GPU {rank} has {sms} SMs: too few for {workers} workers plus schedulers")
    return workers, 4 * (sms - workers)

"""Data-parallel training through torchrun and DistributedDataParallel.

``torchrun --nproc_per_node=N -m posexp train ...`` starts N processes; each sets up the
process group from the environment torchrun provides (NCCL on GPUs, gloo on CPUs).  Every
process samples the same global batch and trains on its own contiguous slice of
``train.batch_size // N`` rows; DDP averages the gradients, which equals the gradient of the
whole batch.  Only rank 0 writes the run directory and evaluates.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


def join(device_type: str) -> World:
    """The process group torchrun describes in the environment; a world of one otherwise."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size == 1:
        return World()
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device_type == "cuda" else "gloo")
    return World(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def reduced(value: torch.Tensor, world: World) -> torch.Tensor:
    """The mean of a scalar over all processes, left on the device (no wait for it)."""
    if world.size > 1:
        value = value.detach().clone()
        dist.all_reduce(value)
        value /= world.size
    return value


def barrier(world: World) -> None:
    if world.size > 1:
        dist.barrier()


def leave(world: World) -> None:
    if world.size > 1 and dist.is_initialized():
        dist.destroy_process_group()

"""Nodes: which ranks share a machine.

In the story, the crew is spread over several buildings: shouting inside a building is cheap
(NVLink, shared memory), shouting across the street is not (InfiniBand, Ethernet). A
:class:`Topology` says which rank is in which building.

The layout is torchrun's: ``world_size`` ranks as ``nodes`` nodes of ``ranks_per_node`` each,
node ``i`` holding ranks ``i * ranks_per_node .. (i + 1) * ranks_per_node - 1`` (contiguous), so

    node_of(rank)    = rank // ranks_per_node        (torchrun's GROUP_RANK)
    local_rank(rank) = rank %  ranks_per_node        (torchrun's LOCAL_RANK)

On one machine a crew makes the nodes up (``zerolab.Crew(4, nodes=2)``: ranks 0-1 and 2-3);
under ``torchrun --nnodes`` they are real. Either way each rank reads its topology with
:func:`current`, from torchrun's variables (``LOCAL_WORLD_SIZE``), and ``Comm.node_comm()``,
``Comm.cross_comm()`` and ``Comm.sub_comm(k)`` build process groups from it.
"""
from __future__ import annotations

import dataclasses
import os

from ..i18n import catalogue

__all__ = ["Topology", "current"]

T = catalogue("around")   # the messages in the edition's language (zerolab/i18n/messages_zh.py)


@dataclasses.dataclass(frozen=True)
class Topology:
    """``world_size`` ranks as ``world_size // ranks_per_node`` nodes of ``ranks_per_node`` ranks."""
    world_size: int
    ranks_per_node: int

    def __post_init__(self) -> None:
        n, k = self.world_size, self.ranks_per_node
        if isinstance(n, bool) or int(n) != n or n < 1:
            raise ValueError(T("Topology: world_size must be a whole number >= 1, not {n}", n=repr(n)))
        if isinstance(k, bool) or int(k) != k or k < 1 or n % k:
            raise ValueError(T("Topology: ranks_per_node={k} must be a whole number >= 1 that divides "
                               "world_size={n} (every node holds the same number of ranks, as under torchrun)",
                               k=repr(k), n=n))

    @property
    def nodes(self) -> int:
        return self.world_size // self.ranks_per_node

    def _check(self, rank: int) -> int:
        if not 0 <= rank < self.world_size:
            raise ValueError(T("rank {rank} is not in 0..{last}", rank=rank, last=self.world_size - 1))
        return rank

    def node_of(self, rank: int) -> int:
        """The node (torchrun's GROUP_RANK) that holds ``rank``."""
        return self._check(rank) // self.ranks_per_node

    def local_rank(self, rank: int) -> int:
        """``rank``'s place on its node (torchrun's LOCAL_RANK)."""
        return self._check(rank) % self.ranks_per_node

    def same_node(self, ranks) -> bool:
        """True when all ``ranks`` are on one node (a collective among them never leaves it)."""
        return len({self.node_of(r) for r in ranks}) <= 1

    def __str__(self) -> str:
        return f"{self.world_size} ranks as {self.nodes} node{'s' if self.nodes != 1 else ''} of {self.ranks_per_node}"


def current() -> Topology:
    """This rank's topology: the world size (the process group's, else ``WORLD_SIZE``) and the ranks
    per node (``LOCAL_WORLD_SIZE``, which torchrun and a crew set; one node when it is absent)."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        world = dist.get_world_size()
    else:
        world = int(os.environ.get("WORLD_SIZE", 1))
    local = os.environ.get("LOCAL_WORLD_SIZE", "").strip()
    per_node = int(local) if local else world
    if world % per_node:
        raise RuntimeError(T("LOCAL_WORLD_SIZE={per_node} does not divide the world size {world}: zerolab's "
                             "topology needs the same number of ranks on every node (torchrun --nproc-per-node)",
                             per_node=per_node, world=world))
    return Topology(world, per_node)

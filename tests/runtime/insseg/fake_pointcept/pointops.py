"""Stand-in for Pointcept's pointops.knn_query(k, coord, offset, new_coord, new_offset) -> (idx, dist).

Brute force on CPU; idx is [M, k] int, as the CUDA op returns (batch size 1 here)."""

import torch


def knn_query(k, coord, offset, new_coord, new_offset):
    dist = torch.cdist(new_coord.float(), coord.float())
    d, idx = torch.topk(dist, k, dim=1, largest=False)
    return idx.int(), d

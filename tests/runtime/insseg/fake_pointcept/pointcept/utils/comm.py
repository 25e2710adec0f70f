"""Stand-in for pointcept.utils.comm with a settable fake world (test-only).

The real functions: get_world_size, get_rank, is_main_process, synchronize and
gather(data, dst=0, group=None) -> list on dst, [] elsewhere. Here `WORLD` decides
rank and size, and `OTHER_RANKS` supplies what the other ranks would send; every
object passed to gather is pickled (as torch.distributed.gather_object does) and
recorded in `GATHERED_BYTES`.
"""

import pickle

WORLD = {"rank": 0, "size": 1}
OTHER_RANKS = []
GATHERED_BYTES = []


def get_world_size():
    return WORLD["size"]


def get_rank():
    return WORLD["rank"]


def is_main_process():
    return get_rank() == 0


def synchronize():
    return None


def gather(data, dst=0, group=None):
    payload = pickle.dumps(data)
    GATHERED_BYTES.append(len(payload))
    if get_world_size() == 1:
        return [pickle.loads(payload)]
    if get_rank() != dst:
        return []
    others = [pickle.loads(pickle.dumps(o)) for o in OTHER_RANKS]
    return [pickle.loads(payload), *others]

"""STAND-IN for pointcept.utils.comm: a single process, never distributed."""


def get_world_size() -> int:
    return 1


def get_rank() -> int:
    return 0


def is_main_process() -> bool:
    return True


def synchronize() -> None:
    return None

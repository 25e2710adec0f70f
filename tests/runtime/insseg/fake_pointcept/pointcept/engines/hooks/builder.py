from pointcept.utils.registry import Registry

HOOKS = Registry("hooks")

"""Stand-in for pointcept.utils.registry.Registry: register_module(name=None, force=False, module=None)."""


class Registry:
    def __init__(self, name):
        self._name = name
        self._module_dict = {}

    @property
    def module_dict(self):
        return self._module_dict

    def get(self, key):
        return self._module_dict.get(key)

    def _register_module(self, module_class, module_name=None, force=False):
        name = module_name or module_class.__name__
        if not force and name in self._module_dict:
            raise KeyError(f"{name} is already registered in {self._name}")
        self._module_dict[name] = module_class

    def register_module(self, name=None, force=False, module=None):
        if module is not None:
            self._register_module(module, name, force)
            return module

        def _register(cls):
            self._register_module(cls, name, force)
            return cls

        return _register

    def build(self, cfg):
        cfg = dict(cfg)
        return self._module_dict[cfg.pop("type")](**cfg)

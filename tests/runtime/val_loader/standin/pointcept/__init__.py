"""STAND-IN for Pointcept, for tests only: not Pointcept, and not installed anywhere.

It mirrors the names and call interfaces the podmortem_runtime.pointcept
modules use, as read from Pointcept's source (pointcept/engines/train.py,
pointcept/engines/hooks/{builder,default}.py, pointcept/utils/registry.py,
pointcept/datasets): ``TRAINERS``/``HOOKS`` registries with
``register_module(name=None, force=False, module=None)``, ``get`` and
``build(cfg)``; ``TrainerBase`` calling each hook's ``before_train``,
``after_epoch`` and ``after_train``; ``Trainer.build_val_loader`` reading
``cfg.evaluate``, ``cfg.data.val``, ``cfg.batch_size_val_per_gpu`` and
``cfg.num_worker_per_gpu``. Training itself (model, optimiser) is left out.
"""

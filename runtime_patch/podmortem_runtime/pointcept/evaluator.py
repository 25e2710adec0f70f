"""``LeanInsSegEvaluator``: Pointcept's ``InsSegEvaluator`` with the lean count-table path.

Pointcept's hook keeps a full-size mask per proposal of every validation scene and
``comm.gather``s them to rank 0; with PointGroup's P growing per epoch this is what
got the training pod OOM-killed. This subclass replaces ``eval()`` only: each scene
becomes a `podmortem_runtime.insseg.Scene` (counts) right after the forward pass,
the knn map to original points is counted through instead of expanded, and only
the count tables are gathered. Log lines, TensorBoard/W&B scalars and the
checkpoint metric (``comm_info["current_metric_value"]`` = AP50) are Pointcept's.

Switch it on in a Pointcept config (after ``import podmortem_runtime.pointcept``
has run in the training entry point, so that the hook is registered)::

    hooks = [..., dict(type="LeanInsSegEvaluator", segment_ignore_index=(-1, 0, 1),
                       instance_ignore_index=-1), ...]
"""

from __future__ import annotations

from typing import Any

import pointcept.utils.comm as comm
import torch
from pointcept.engines.hooks.builder import HOOKS
from pointcept.engines.hooks.evaluator import InsSegEvaluator

from podmortem_runtime import insseg


@HOOKS.register_module()
class LeanInsSegEvaluator(InsSegEvaluator):  # type: ignore[misc]
    """Same AP, log lines and best-checkpoint metric as ``InsSegEvaluator``; counts instead of masks."""

    def __init__(
        self, segment_ignore_index: tuple[int, ...] = (-1,), instance_ignore_index: int = -1, **kwargs: Any
    ) -> None:
        super().__init__(
            segment_ignore_index=segment_ignore_index, instance_ignore_index=instance_ignore_index, **kwargs
        )

    # -- the pieces Pointcept's eval() calls, on count tables -----------------------------------

    @property
    def class_names(self) -> list[str]:
        data = self.trainer.cfg.data
        return [data.names[i] for i in range(data.num_classes)]

    def associate_scene(
        self, output_dict: dict[str, Any], segment: Any, instance: Any, point_index: Any = None
    ) -> insseg.Scene:
        """One scene's count table from the model output (dense masks or `insseg.SparseMasks`)."""
        return insseg.associate(
            output_dict["pred_classes"],
            output_dict["pred_scores"],
            output_dict["pred_masks"],
            segment,
            instance,
            class_names=self.class_names,
            segment_ignore_index=tuple(self.segment_ignore_index),
            instance_ignore_index=self.instance_ignore_index,
            min_region_size=self.min_region_sizes,
            point_index=point_index,
        )

    def evaluate_scenes(self, scenes: list[insseg.Scene]) -> dict[str, Any]:
        """Pointcept's ``evaluate_matches`` result dict, from count tables."""
        return insseg.average_precision(
            scenes,
            class_names=self.class_names,
            segment_ignore_index=tuple(self.segment_ignore_index),
            min_region_size=self.min_region_sizes,
        )

    # -- eval(), as Pointcept's, step for step -----------------------------------------------------

    def eval(self) -> None:
        trainer = self.trainer
        trainer.logger.info(">>>>>>>>>>>>>>>> Start Evaluation >>>>>>>>>>>>>>>>")
        trainer.model.eval()
        scenes: dict[Any, insseg.Scene] = {}
        for i, input_dict in enumerate(trainer.val_loader):
            assert len(input_dict["offset"]) == 1  # Pointcept: batch size 1 per GPU
            # Scenes are keyed by name so that DistributedSampler's padding duplicates count once.
            name = input_dict.pop("name")[0] if "name" in input_dict else (comm.get_rank(), i)
            if torch.cuda.is_available():
                for key, value in input_dict.items():
                    if isinstance(value, torch.Tensor):
                        input_dict[key] = value.cuda(non_blocking=True)
            with torch.no_grad():
                output_dict = trainer.model(input_dict)
            loss = output_dict["loss"]
            segment = input_dict["segment"]
            instance = input_dict["instance"]
            point_index = None
            if "origin_coord" in input_dict:
                import pointops  # type: ignore[import-not-found]  # Pointcept's CUDA ops; only needed for the original-point map

                idx, _ = pointops.knn_query(
                    1,
                    input_dict["coord"].float(),
                    input_dict["offset"].int(),
                    input_dict["origin_coord"].float(),
                    input_dict["origin_offset"].int(),
                )
                point_index = idx.cpu().flatten().long()  # counted through, never pred_masks[:, idx]
                segment = input_dict["origin_segment"]
                instance = input_dict["origin_instance"]
            scenes[name] = self.associate_scene(output_dict, segment, instance, point_index)
            del output_dict  # the masks go now, not at the next iteration

            trainer.storage.put_scalar("val_loss", loss.item())
            trainer.logger.info(f"Test: [{i + 1}/{len(trainer.val_loader)}] Loss {loss.item():.4f} ")

        loss_avg = trainer.storage.history("val_loss").avg
        comm.synchronize()
        scenes_sync = comm.gather(scenes, dst=0)  # count tables only: kilobytes per scene
        if not comm.is_main_process():
            return
        merged: dict[Any, insseg.Scene] = {}
        for _ in range(len(scenes_sync)):
            merged.update(scenes_sync.pop())  # Pointcept's merge order: last rank first
        ap_scores = self.evaluate_scenes(list(merged.values()))
        all_ap = ap_scores["all_ap"]
        all_ap_50 = ap_scores["all_ap_50%"]
        all_ap_25 = ap_scores["all_ap_25%"]
        trainer.logger.info(f"Val result: mAP/AP50/AP25 {all_ap:.4f}/{all_ap_50:.4f}/{all_ap_25:.4f}.")
        for i, label_name in enumerate(self.valid_class_names):
            per_class = ap_scores["classes"][label_name]
            trainer.logger.info(
                f"Class_{i}-{label_name} Result: AP/AP50/AP25 "
                f"{per_class['ap']:.4f}/{per_class['ap50%']:.4f}/{per_class['ap25%']:.4f}"
            )
        current_epoch = trainer.epoch + 1
        if trainer.writer is not None:
            trainer.writer.add_scalar("val/loss", loss_avg, current_epoch)
            trainer.writer.add_scalar("val/mAP", all_ap, current_epoch)
            trainer.writer.add_scalar("val/AP50", all_ap_50, current_epoch)
            trainer.writer.add_scalar("val/AP25", all_ap_25, current_epoch)
            if getattr(trainer.cfg, "enable_wandb", False):
                import wandb  # type: ignore[import-not-found]

                wandb.log(
                    {
                        "Epoch": current_epoch,
                        "val/loss": loss_avg,
                        "val/mAP": all_ap,
                        "val/AP50": all_ap_50,
                        "val/AP25": all_ap_25,
                    },
                    step=wandb.run.step,
                )
        trainer.logger.info("<<<<<<<<<<<<<<<<< End Evaluation <<<<<<<<<<<<<<<<<")
        trainer.comm_info["current_metric_value"] = all_ap_50  # what CheckpointSaver compares
        trainer.comm_info["current_metric_name"] = "AP50"

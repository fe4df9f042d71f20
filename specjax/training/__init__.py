"""Distillation trainer (DistillSpec-style): data, losses, train loop, checkpoints, sharding."""
from specjax.training.checkpoints import CheckpointError, Checkpointer
from specjax.training.losses import LOSSES, distill_loss, forward_kl, jsd, reverse_kl, tvd
from specjax.training.train import TrainState, engine_eval, read_metrics, restore_draft, train

__all__ = ["CheckpointError", "Checkpointer", "LOSSES", "distill_loss", "forward_kl", "jsd",
           "reverse_kl", "tvd", "TrainState", "engine_eval", "read_metrics", "restore_draft", "train"]

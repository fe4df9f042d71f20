"""Distillation trainer (DistillSpec-style): one loop (`loop.run`) over tasks (a draft model,
`train.draft_task`; Medusa heads, `medusa.medusa_task`; EAGLE-3, DFlash and P-EAGLE drafts,
`eagle3.eagle3_task`, `dflash.dflash_task`, `peagle.peagle_task`), data by stage (prompts `data`,
sampled pools `sampler` / `pools`, self-generated pairs `selfgen`), losses, checkpoints."""
from specjax.training.checkpoints import CheckpointError, Checkpointer
from specjax.training.losses import LOSSES, distill_loss, forward_kl, jsd, reverse_kl, tvd
from specjax.training.train import TrainState, engine_eval, read_metrics, restore_draft, train

__all__ = ["CheckpointError", "Checkpointer", "LOSSES", "distill_loss", "forward_kl", "jsd",
           "reverse_kl", "tvd", "TrainState", "engine_eval", "read_metrics", "restore_draft", "train"]

"""What a run records: metrics to console, wandb and tensorboard (``logger``, ``wandb_process``), learning-curve plots
(``plot``) and eval videos (``video``)."""

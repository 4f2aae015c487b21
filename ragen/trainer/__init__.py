"""The StarPO trainer: its config, the training loop and its phases, checkpoints and metrics."""

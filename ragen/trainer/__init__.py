"""The StarPO trainer: config, batching, the training loop, checkpoints and metrics."""

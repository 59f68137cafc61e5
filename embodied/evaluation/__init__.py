"""Evaluation: what an eval measures and reports (``stats``), and the eval runs: periodic eval during training and
``embodied eval`` (``run``). The worker that plays the episodes is ``embodied.workers.evaluator``."""

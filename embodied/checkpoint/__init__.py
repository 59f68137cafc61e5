"""Checkpoints: the folder format (``store``), and the HMAC signatures that let a resume trust a checkpoint's pickled
env snapshots (``trust``)."""

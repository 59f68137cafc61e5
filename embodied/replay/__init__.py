"""Replay buffers of off-policy learners: the chunk-transition buffer (``buffer``) and the demonstrations mixed into
its batches (``demos``)."""

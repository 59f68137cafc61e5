"""Foundation: the data types every layer passes around, the registries, atomic file writes, numerics and
process memory. Imports nothing of embodied above it."""

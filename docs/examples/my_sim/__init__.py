"""An example user package with its own simulator (see docs/custom_simulator.md)."""

"""An example user package with its own algorithm (see docs/extending.md)."""

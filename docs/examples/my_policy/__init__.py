"""An example user package with its own policy (see docs/extending.md)."""

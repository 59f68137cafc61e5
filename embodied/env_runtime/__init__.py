"""The env runtime: building envs from a config (``factory``), the catalog of registered ids (``catalog``), the
checks run before any worker starts (``preflight``) and ``embodied check-env`` (``check_env``)."""

"""The policy contract: the ``Policy`` interface every policy implements and ``build_policy`` (``base``), the
``policy:`` section's base config class (``config``), and what an off-policy learner asks of a policy (``q_functions``).
"""

"""π0 as transformers ships it (``policy.type: pi0``)."""

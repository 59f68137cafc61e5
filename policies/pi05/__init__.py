"""π0.5 on transformers' π0 (``policy.type: pi05``): ``model.py`` is the model as π0's difference, the rest the
policy around it, as ``policies/pi0/`` is π0's."""

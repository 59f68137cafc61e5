"""Runs: training (``train``: the sync loop, ``async_iterations``, ``offpolicy_iterations`` over the background
``producer``), resume and stop requests, SFT and demonstration collection."""

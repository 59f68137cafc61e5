"""The parts of ``benchmarks/vla_throughput.py``: the policies and inputs it times (``models``), the raw
transformers passes it compares ``act()`` with (``raw``), and its table and plot (``report``)."""

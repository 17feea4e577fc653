"""The driver and the CLI: the one layer that wires the core to Ray (``actors/``), the cluster
helpers (``cluster/``) and the algorithms. Everything else in ``rsi/`` imports none of them."""

"""The command line (``perfwarden``, ``main.py``), one module per command family: the composition root,
which reads what the user asked for, builds the lab, the brains and the red team it names and hands them to
the orchestrator, the auditor or the backtest. Nothing below imports it."""

"""Reviewing verdicts: the trail of a run in the terminal, as one self-contained HTML file, as
md/json/csv exports, and side by side for two runs (``perfwarden review``) or for a backtest."""

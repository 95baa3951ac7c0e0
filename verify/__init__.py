"""Checks of the auditor from outside it: the backtest over fixtures with frozen answer keys (and the
MLPerf cases), the field and coherent-forgery explorers with their oracles, and the op bench's candidate
exploits. Each drives the auditor as a black box and judges its verdicts."""

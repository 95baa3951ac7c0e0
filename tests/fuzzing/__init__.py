"""The fuzzers: test tools that drive every reader and command (``fuzz.py``) and run directories as input
(``fuzz_rundir.py``) with unittest.mock and typer's test runner, for the tests and ``benchmarks/fuzz.py``;
never installed with perfwarden."""

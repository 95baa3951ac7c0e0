"""A test double of the ``sglang`` package: only ``python -m sglang.launch_server`` (see launch_server.py).

Not SGLang. CI machines have no GPU and SGLang cannot be installed there, so the SGLang lab's own
code (command line, environment check, readiness, /server_info capture, LoadGen reps, parity dump,
quality eval, teardown) is driven against this stand-in instead. docs/testing.md, "The stand-in SGLang".
"""

__version__ = "0.0.0+standin"

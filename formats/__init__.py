"""The evidence formats every package shares: the records, the line schemas and their readers, the safe
readers and writers, the seal, and the parsers of the logs and counters perfwarden reads from outside
(LoadGen's and MLPerf's logs, vLLM's logged arguments and ``/metrics``).

This is the ground floor: it imports no other perfwarden package, so the auditor can read the evidence
with it without importing any code that produced the numbers it checks (design §1).
"""

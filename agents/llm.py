"""The LLM client moved to ``perfwarden.harness.llm_client`` (a neutral module the auditor may import;
issue 19). Re-exported here so producer code written before the move still imports; new code imports
the harness module."""

from perfwarden.harness.llm_client import (LLMClient, LLMOutputError, LLMUnavailable, Usage, extract_json,  # noqa: F401
                                           parse_answer, response_format)

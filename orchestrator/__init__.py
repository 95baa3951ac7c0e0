"""perfwarden.orchestrator"""

"""perfwarden.agents.auditor"""

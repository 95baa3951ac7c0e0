"""perfwarden.auditor"""

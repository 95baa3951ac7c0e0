"""perfwarden.agents"""

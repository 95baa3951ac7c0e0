"""perfwarden.proof"""

"""perfwarden.skills"""

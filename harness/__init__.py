"""perfwarden.harness"""

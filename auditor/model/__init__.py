"""The evidence model (``auditor/data/evidence_model.json``) and the one engine that applies it.

``schema`` reads the model into typed records; the engine's parts judge loaded evidence with it (one
module per concern); ``doc`` renders it for people (``docs/evidence-model.md``).
"""

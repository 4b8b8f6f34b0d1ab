"""Drive the real Claude Code CLI against a fake Anthropic Messages API on 127.0.0.1.

``fake_api`` is the scripted model and records every request; ``harness`` runs ``claude -p``
in a throwaway home that sends traffic to nothing but that fake.
"""

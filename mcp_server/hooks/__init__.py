"""Claude Code hooks: trimem's recall and capture, and their place in Claude Code's settings."""

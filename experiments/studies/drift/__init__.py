"""Float32 drift of the group-RNN state from its group over long sequences (README.md here)."""

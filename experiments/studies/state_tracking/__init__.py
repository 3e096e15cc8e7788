"""State tracking (parity, mod 3, S3, A5, S5) and the copy task across model arms (README.md here)."""

"""Why the O(n) group RNN diverges at large n, and what fixes it (README.md here)."""

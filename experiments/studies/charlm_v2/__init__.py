"""The v2 character-level study: the paper's three claims at 200k parameters, tuned rates, 3 seeds (README.md here)."""

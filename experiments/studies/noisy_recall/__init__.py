"""Noisy in-context recall: does the Newton–Schulz read help the mLSTM? (README.md here)"""

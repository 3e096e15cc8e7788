"""Sweep files (``python -m experiments.sweep experiments/sweeps/NAME.py``) and their shared parts."""

"""Benchmarks: contenders measured in one run on one machine, reported as ratios."""

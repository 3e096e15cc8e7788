"""Datasets as integer token streams."""

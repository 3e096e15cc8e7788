"""Synthetic sequence tasks (NumPy only, seeded by an explicit ``numpy.random.Generator``)."""

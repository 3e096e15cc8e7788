"""Character-level language modelling, early learning: 12 arms at 0.5M parameters, 400 steps
(README.md here)."""

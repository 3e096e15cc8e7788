"""The studies: one package per question, beside its README, its sweep presets, probes and report
code. Results live under ``experiments/results/<study>/``. A study imports the library
(``experiments``, ``reference``, ``manifold_impl``), never another study."""

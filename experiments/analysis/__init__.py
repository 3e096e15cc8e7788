"""What the library and the studies measure about runs: training-dynamics diagnostics
(``diagnostics``), intervals and seed-paired differences (``stats``) and the noisy-recall sweep's
statistics (``recall``, used by ``experiments.report``)."""

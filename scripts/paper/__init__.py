"""The paper pipeline (the reproduction of arXiv 2611.13545, docs/CALIBRATION.md): the sweep of
precision arms, the prompt pool, the drift analysis, the phase diagram and the report. The commands
are thin wrappers in scripts/ (compare.py, paper_report.py, paper_phase.py, paper_drift.py,
paper_pool.py, paper_calibration.py); each calls the `main` of its module here.

Imports go one way: a module imports only modules of a lower layer of LAYERS, never one of its own
layer or above (tests/test_imports.py checks it).
"""

LAYERS = (
    ("arms", "pool", "calibration"),  # arms and presets, config reading; the two tools on the base
    ("runs",),                        # one run's metrics and config, loaded
    ("measures",),                    # paired differences, gain levels, lags: numbers, no rules
    ("verdicts",),                    # the claims' rules and the targets, judged on the measures
    ("drift", "phase"),               # the drift analysis of FP16's weights; the phase diagram
    ("report", "presets"),            # RESULTS.md and its plots (embeds the phase section); the README's presets table
    ("sweep",),                       # scripts/compare.py: runs the arms, then drift, phase, report
)

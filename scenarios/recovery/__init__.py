"""The error-recovery suite (suite.yaml, built by scenarios/recovery/build.py) and its comparison report."""

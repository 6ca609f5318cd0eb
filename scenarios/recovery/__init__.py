"""The error-recovery suite (suite.yaml, built by scenarios/recovery_suite.py) and its comparison report."""

"""rein interventions package."""

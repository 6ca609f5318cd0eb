"""rein scenarios package."""

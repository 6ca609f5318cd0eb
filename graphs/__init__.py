"""rein graphs package."""

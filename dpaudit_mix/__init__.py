"""dpaudit-mix: differentially private mixing of public data sources (DP-MixMin) and its audit."""

__version__ = "0.2.0"  # the one place the version is written (pyproject.toml reads it)

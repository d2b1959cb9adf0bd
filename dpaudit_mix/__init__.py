"""dpaudit-mix: differentially private mixing of public data sources (DP-MixMin) and its audit."""

__version__ = "0.1.0"

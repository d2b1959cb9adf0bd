"""The package's version: the one place it is written (pyproject.toml reads it; releases record it).
A module of its own, at the bottom, so that what records it never imports the top package."""

__version__ = "0.2.0"

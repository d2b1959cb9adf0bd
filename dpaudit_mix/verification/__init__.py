"""Accountant verification for CI (`dpaudit-mix verify-accountant`)."""

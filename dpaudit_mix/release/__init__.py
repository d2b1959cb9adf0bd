"""The release gate (`dpaudit-mix release`, `check-release`) and the privacy-budget ledger."""

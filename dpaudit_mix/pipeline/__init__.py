"""The DP-MixMin pipeline, image track (`dpaudit-mix pipeline`)."""

"""Weight-recovery reports (`dpaudit-mix recovery`): private λ against non-private λ★."""

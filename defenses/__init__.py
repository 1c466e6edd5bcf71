"""leakmeter defenses."""

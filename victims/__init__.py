"""leakmeter victims."""

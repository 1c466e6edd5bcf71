"""leakmeter reports."""

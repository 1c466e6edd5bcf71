"""What the run pipeline, sweeps, scans and the attacks all use: the oracle (the attacker's only
view), progress lines, output folders, interrupts, error types, thread pinning and Ray start-up."""

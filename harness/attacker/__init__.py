"""What the attacker knows and builds: reference (shadow) models trained in batches, the
membership evaluation set it is handed, and the signals it reads from models' outputs."""

"""What the attacker knows and builds for itself: informed-adversary releases and the training
recipe as the attacker knows it (paper 004 Def. 1), the membership evaluation set it is handed,
reference (shadow) models trained in batches, and the signals it reads from models' outputs."""

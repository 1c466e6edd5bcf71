"""What the attacker knows and builds for itself: informed-adversary releases (paper 004 Def. 1),
the training recipe as the attacker knows it, and shadow models trained in batches."""

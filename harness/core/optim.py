"""The harness's first-order optimizers (Adam, SGD with momentum, RMSprop): victims/models/optim.py's,
re-exported so attack modules reach them without importing the victim layer. Not torch.optim:
its constructors import torch._dynamo (~1.2 s of CPU per process)."""

from victims.models.optim import SGD, Adam, RMSprop

__all__ = ["Adam", "SGD", "RMSprop"]

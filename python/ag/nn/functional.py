"""ag.nn.functional, as torch.nn.functional: the ops of layers as functions."""

"""ag.autograd: gradient checks (python/src/io.cpp binds ag's gradcheck)."""


def gradcheck(*args, **kwargs):
    raise NotImplementedError("gradcheck: not bound yet")


def gradcheck_parameters(*args, **kwargs):
    raise NotImplementedError("gradcheck_parameters: not bound yet")

"""firstfault: say why a distributed GPU workload failed - the fault that began it and where it began."""

__version__ = "0.1.0"

"""The attribution engine: a pure library (no I/O beyond reading the evidence it is given)."""

from firstfault.engine.catalog import Catalog, load_catalog
from firstfault.engine.engine import Engine
from firstfault.engine.model import Attribution, ExecutionContext, Observation, SourceKind
from firstfault.engine.session import Session

__all__ = ["Attribution", "Catalog", "Engine", "ExecutionContext",
           "Observation", "Session", "SourceKind", "load_catalog"]

"""The attribution engine: a pure library (no I/O beyond reading the evidence it is given)."""

from firstfault.engine.catalog import Catalog, CatalogError, load_catalog
from firstfault.engine.engine import Engine, default_engine
from firstfault.engine.evidence import EvidenceError
from firstfault.engine.model import Attribution, ExecutionContext, Observation, SourceKind
from firstfault.engine.session import Session

__all__ = ["Attribution", "Catalog", "CatalogError", "Engine", "EvidenceError", "ExecutionContext",
           "Observation", "Session", "SourceKind", "default_engine", "load_catalog"]

"""Where the graphs live: the `GraphStore` contract (base.py) and its LadybugDB implementation (ladybugdb.py)."""

from .base import (
    Direction,
    Entity,
    EntityType,
    GraphInfo,
    GraphStore,
    Hop,
    Relation,
    Rows,
    Target,
    TypeRelation,
    UpsertResult,
    Value,
)
from .ladybugdb import LadybugGraphStore

__all__ = [
    "Direction",
    "Entity",
    "EntityType",
    "GraphInfo",
    "GraphStore",
    "Hop",
    "LadybugGraphStore",
    "Relation",
    "Rows",
    "Target",
    "TypeRelation",
    "UpsertResult",
    "Value",
]

"""ragmesh graph service: entities and their relations, one graph per collection, walked by assistants."""

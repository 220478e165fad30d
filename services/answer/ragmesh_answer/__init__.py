"""ragmesh answer service: questions -> answers with cited sources (a chat model, or extractive)."""

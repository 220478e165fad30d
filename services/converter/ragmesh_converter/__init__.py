"""ragmesh converter: documents and web pages to Markdown with markitdown (ragmesh.converter.v1)."""

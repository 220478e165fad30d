"""The graph service's error domain (google.rpc.ErrorInfo.domain of the errors it raises)."""

DOMAIN = "graph.ragmesh"

"""The answer service's error domain (google.rpc.ErrorInfo.domain of the errors it raises)."""

DOMAIN = "answer.ragmesh"

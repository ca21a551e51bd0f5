"""The cluster: the coordinator and worker roles, the transport between them, the wire code, local runs."""

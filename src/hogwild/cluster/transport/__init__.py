"""The transport between cluster processes: TLS and keys, servers, senders, health, handshakes."""

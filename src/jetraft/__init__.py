"""jetraft: a NATS server with JetStream, clustered with RAFT, written in Python."""

__version__ = "0.1.0"
